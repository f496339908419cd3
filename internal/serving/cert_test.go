package serving

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	certutil "k8s.io/client-go/util/cert"
)

// serveTLS serves "ok" with the TLS configuration of o on a free loopback port, as
// the metrics server is served, and returns the https URL.
func serveTLS(t *testing.T, o *Options) string {
	t.Helper()
	cfg, err := o.tlsConfig(t.Context(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddress(t)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil {
			http.Error(w, "served without TLS", http.StatusInternalServerError)
			return
		}
		fmt.Fprint(w, "ok")
	})
	srv, err := Serve(t.Context(), "test", addr, ok, cfg, maxMetricsConnections)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return "https://" + addr
}

// freeAddress is a loopback address with a port that was free a moment ago.
func freeAddress(t *testing.T) string {
	t.Helper()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// A request over plain HTTP to the TLS port is answered 400, as Go's HTTPS server
// answers it, not dropped: the server sees its connections as TLS ones.
func TestServeTLSAnswersPlainHTTP(t *testing.T) {
	url := serveTLS(t, &Options{})
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "http"+strings.TrimPrefix(url, "https"), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("plain HTTP to the TLS port: %v, want a 400", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("plain HTTP to the TLS port: status %d, want 400", resp.StatusCode)
	}
}

// get fetches url trusting only the certificates in the PEM file caFile, or trusting
// anything when caFile is empty, and returns the body and the certificate served.
func get(t *testing.T, url, caFile string) (string, *x509.Certificate, error) {
	t.Helper()
	tlsConfig := &tls.Config{InsecureSkipVerify: caFile == ""} // the test reads whatever is served
	if caFile != "" {
		pool, err := certutil.NewPool(caFile)
		if err != nil {
			t.Fatal(err)
		}
		tlsConfig.RootCAs = pool
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), resp.TLS.PeerCertificates[0], err
}

func TestSelfSignedCertificateInMemory(t *testing.T) {
	url := serveTLS(t, NewOptions("c"))
	body, cert, err := get(t, url, "")
	if err != nil || body != "ok" {
		t.Fatalf("GET %s = %q, %v", url, body, err)
	}
	if !strings.HasPrefix(cert.Subject.CommonName, "localhost") || !cert.NotAfter.After(time.Now().Add(300*24*time.Hour)) {
		t.Errorf("served %q until %v, want a certificate for localhost valid for about a year", cert.Subject.CommonName, cert.NotAfter)
	}
	if err := cert.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("the certificate is not for 127.0.0.1: %v", err)
	}
}

func TestSelfSignedCertificateInCertDir(t *testing.T) {
	dir := t.TempDir()
	o := NewOptions("sample-controller")
	o.CertDir = dir
	url := serveTLS(t, o)
	crt := filepath.Join(dir, "sample-controller.crt")
	// A client that trusts what the controller wrote, and nothing else, gets through.
	if body, _, err := get(t, url, crt); err != nil || body != "ok" {
		t.Fatalf("GET %s trusting %s = %q, %v", url, crt, body, err)
	}
	written, err := os.ReadFile(crt)
	if err != nil {
		t.Fatal(err)
	}

	// The next start serves the same certificate.
	again := serveTLS(t, o)
	if body, _, err := get(t, again, crt); err != nil || body != "ok" {
		t.Fatalf("GET %s after a restart, trusting %s = %q, %v", again, crt, body, err)
	}
	if reread, _ := os.ReadFile(crt); !bytes.Equal(reread, written) {
		t.Error("a restart replaced the certificate in --cert-dir")
	}
}

func TestCertificateFiles(t *testing.T) {
	dir := t.TempDir()
	cert, key, err := certutil.GenerateSelfSignedCertKey("metrics.example.com", []net.IP{net.IPv4(127, 0, 0, 1)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	o := NewOptions("c")
	o.TLSCertFile, o.TLSPrivateKeyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	o.CertDir = filepath.Join(dir, "unused")
	for file, data := range map[string][]byte{o.TLSCertFile: cert, o.TLSPrivateKeyFile: key} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	url := serveTLS(t, o)
	_, served, err := get(t, url, o.TLSCertFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(served.Subject.CommonName, "metrics.example.com") {
		t.Errorf("served %q, want the certificate of --tls-cert-file", served.Subject.CommonName)
	}
	if _, err := os.Stat(o.CertDir); !os.IsNotExist(err) {
		t.Errorf("--cert-dir was used although --tls-cert-file was given: %v", err)
	}
}
