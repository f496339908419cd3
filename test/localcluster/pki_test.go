package localcluster

import (
	"crypto/x509"
	"encoding/pem"
	"net"
	"slices"
	"testing"
)

func TestAuthorityIssues(t *testing.T) {
	ca, err := newAuthority("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)

	serving, err := ca.issueServing("serving", []string{"localhost", "kubernetes.default.svc"}, []net.IP{net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := ca.issueClient("admin", "system:masters")
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		pair       keyPair
		usage      x509.ExtKeyUsage
		host       string
		wantUser   string
		wantGroups []string
	}{
		{name: "serving certificate is valid for 127.0.0.1", pair: serving, usage: x509.ExtKeyUsageServerAuth, host: "127.0.0.1", wantUser: "serving"},
		{name: "serving certificate is valid for the kubernetes Service", pair: serving, usage: x509.ExtKeyUsageServerAuth, host: "kubernetes.default.svc", wantUser: "serving"},
		{name: "client certificate names its user and groups", pair: admin, usage: x509.ExtKeyUsageClientAuth, wantUser: "admin", wantGroups: []string{"system:masters"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cert := parseCert(t, tc.pair.certPEM)
			_, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.host, KeyUsages: []x509.ExtKeyUsage{tc.usage}})
			if err != nil {
				t.Errorf("does not verify against the CA: %v", err)
			}
			if cert.Subject.CommonName != tc.wantUser {
				t.Errorf("common name %q, want %q", cert.Subject.CommonName, tc.wantUser)
			}
			if !slices.Equal(cert.Subject.Organization, tc.wantGroups) {
				t.Errorf("organizations %v, want %v", cert.Subject.Organization, tc.wantGroups)
			}
			if block, _ := pem.Decode(tc.pair.keyPEM); block == nil || block.Type != "PRIVATE KEY" {
				t.Errorf("key is not a PEM PKCS#8 private key")
			}
		})
	}
}

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM block in certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
