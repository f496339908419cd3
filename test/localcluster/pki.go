// The cluster's PKI: one CA, the components' serving certificate, client certificates
// for every identity, and the service account signing key.

package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is long enough for any local session and short enough that a leaked
// directory is not a lasting credential.
const certValidity = 7 * 24 * time.Hour

// keyPair is a certificate with its private key, both PEM encoded.
type keyPair struct {
	certPEM []byte
	keyPEM  []byte
}

// authority signs every certificate of one local cluster: the serving certificates of
// the components and the client certificates the apiserver accepts.
type authority struct {
	cert *x509.Certificate
	key  crypto.Signer
	keyPair
}

func newAuthority(commonName string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{
		cert:    cert,
		key:     key,
		keyPair: keyPair{certPEM: encodeCert(der), keyPEM: keyPEM},
	}, nil
}

// issueServing issues a serving certificate valid for the given names and addresses.
func (a *authority) issueServing(commonName string, dnsNames []string, ips []net.IP) (keyPair, error) {
	return a.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: commonName},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// issueClient issues a client certificate; the apiserver reads the user name from the
// common name and the groups from the organizations.
func (a *authority) issueClient(user string, groups ...string) (keyPair, error) {
	return a.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (a *authority) issue(tmpl *x509.Certificate) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating key for %q: %w", tmpl.Subject.CommonName, err)
	}
	if tmpl.SerialNumber, err = newSerial(); err != nil {
		return keyPair{}, err
	}
	tmpl.NotBefore = a.cert.NotBefore
	tmpl.NotAfter = a.cert.NotAfter
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing certificate for %q: %w", tmpl.Subject.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// newServiceAccountKey returns the key the apiserver signs service account tokens with,
// PEM encoded, and its public half for verifying them.
func newServiceAccountKey() (keyPEM, publicPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating service account key: %w", err)
	}
	if keyPEM, err = encodeKey(key); err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, nil, fmt.Errorf("encoding service account public key: %w", err)
	}
	return keyPEM, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), nil
}

// write stores the pair as <base>.crt and <base>.key in dir and returns both paths.
func (kp keyPair) write(dir, base string) (certPath, keyPath string, err error) {
	certPath = filepath.Join(dir, base+".crt")
	keyPath = filepath.Join(dir, base+".key")
	if err := os.WriteFile(certPath, kp.certPEM, 0o644); err != nil {
		return "", "", fmt.Errorf("writing certificate: %w", err)
	}
	if err := os.WriteFile(keyPath, kp.keyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("writing key: %w", err)
	}
	return certPath, keyPath, nil
}

func newSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	return serial, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
