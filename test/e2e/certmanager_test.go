//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/seed-e6610ed6/sample-controller/test/e2e/framework"
	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// metricsServerName is the name the cert-manager component's certificate is issued
// for, and the ServiceMonitor verifies.
const metricsServerName = "sample-controller-metrics.sample-controller-system.svc"

// checkVerifiedScrape checks that the manifests of every component, as
// `make deploy` renders them, add up to a scrape Prometheus can verify: the
// ServiceMonitor trusts the CA of the Secret a cert-manager Certificate writes, for a
// name the Certificate holds; the Deployment serves the same Secret's certificate; and
// the ServiceMonitor's token comes from a ServiceAccount token Secret whose
// ServiceAccount may get /metrics.
func checkVerifiedScrape(t *testing.T, manifests string) {
	t.Helper()
	objects := map[string]*unstructured.Unstructured{}
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifests), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatal(err)
		}
		if obj.Object != nil {
			objects[obj.GetKind()+"/"+obj.GetName()] = &obj
		}
	}
	get := func(key string) *unstructured.Unstructured {
		obj, ok := objects[key]
		if !ok {
			t.Fatalf("the manifests have no %s", key)
		}
		return obj
	}
	str := func(obj *unstructured.Unstructured, path ...string) string {
		v, _, _ := unstructured.NestedString(obj.Object, path...)
		return v
	}

	monitor := get("ServiceMonitor/sample-controller")
	endpoints, _, _ := unstructured.NestedSlice(monitor.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("the ServiceMonitor has %d endpoints, want 1", len(endpoints))
	}
	endpoint := &unstructured.Unstructured{Object: endpoints[0].(map[string]any)}
	if _, found, _ := unstructured.NestedFieldNoCopy(endpoint.Object, "tlsConfig", "insecureSkipVerify"); found {
		t.Errorf("the ServiceMonitor skips TLS verification with the cert-manager component: %v", endpoint.Object["tlsConfig"])
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(endpoint.Object, "bearerTokenFile"); found {
		t.Error("the ServiceMonitor uses bearerTokenFile, deprecated in the Prometheus Operator")
	}
	caSecret, serverName := str(endpoint, "tlsConfig", "ca", "secret", "name"), str(endpoint, "tlsConfig", "serverName")
	if key := str(endpoint, "tlsConfig", "ca", "secret", "key"); key != "ca.crt" {
		t.Errorf("the ServiceMonitor trusts key %q of its CA Secret, want ca.crt, where cert-manager puts the issuer's CA", key)
	}
	cert := get("Certificate/sample-controller-metrics")
	dnsNames, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
	if str(cert, "spec", "secretName") != caSecret || !slices.Contains(dnsNames, serverName) || serverName != metricsServerName {
		t.Errorf("the ServiceMonitor verifies %q with the CA of Secret %q; the Certificate writes %q for %v",
			serverName, caSecret, str(cert, "spec", "secretName"), dnsNames)
	}

	// The Deployment serves the files of that Secret.
	deployment := get("Deployment/sample-controller")
	pod, _, _ := unstructured.NestedMap(deployment.Object, "spec", "template", "spec")
	containers, _ := pod["containers"].([]any)
	container := containers[0].(map[string]any)
	args, _, _ := unstructured.NestedStringSlice(container, "args")
	mountPath := ""
	mounts, _ := container["volumeMounts"].([]any)
	volumes, _ := pod["volumes"].([]any)
	for _, v := range volumes {
		volume := v.(map[string]any)
		if secret, _, _ := unstructured.NestedString(volume, "secret", "secretName"); secret != caSecret {
			continue
		}
		for _, m := range mounts {
			if mount := m.(map[string]any); mount["name"] == volume["name"] {
				mountPath, _ = mount["mountPath"].(string)
			}
		}
	}
	if mountPath == "" || !slices.Contains(args, "--tls-cert-file="+mountPath+"/tls.crt") || !slices.Contains(args, "--tls-private-key-file="+mountPath+"/tls.key") {
		t.Errorf("the Deployment does not serve the certificate of Secret %q (mounted at %q; args %q)", caSecret, mountPath, args)
	}

	// The token the ServiceMonitor sends is a ServiceAccount's that may get /metrics.
	tokenSecret := get("Secret/" + str(endpoint, "authorization", "credentials", "name"))
	account := tokenSecret.GetAnnotations()["kubernetes.io/service-account.name"]
	if str(tokenSecret, "type") != "kubernetes.io/service-account-token" || account == "" || str(endpoint, "authorization", "credentials", "key") != "token" {
		t.Errorf("the ServiceMonitor's credentials are not a ServiceAccount's token: %v", endpoint.Object["authorization"])
	}
	binding := get("ClusterRoleBinding/" + account)
	subjects, _, _ := unstructured.NestedSlice(binding.Object, "subjects")
	if str(binding, "roleRef", "name") != "sample-controller-metrics-reader" || len(subjects) != 1 ||
		subjects[0].(map[string]any)["name"] != account || subjects[0].(map[string]any)["namespace"] != tokenSecret.GetNamespace() {
		t.Errorf("ServiceAccount %s is not bound to sample-controller-metrics-reader: %v", account, binding.Object)
	}
}

// TestScrapeWithIssuedCertificate scrapes a controller as Prometheus does with the
// prometheus and cert-manager components: over TLS verified with the CA that issued
// the serving certificate, for the Service's name, with the token the token controller
// writes into the scraper's Secret (scraper.yaml, applied to the test's namespace).
func TestScrapeWithIssuedCertificate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	ns := env.NewNamespace(t)

	// What cert-manager's CA Issuer would write: a root, and a certificate it issued
	// for the Service's names.
	dir := t.TempDir()
	ca, caKey := newTestCA(t, "sample-controller-ca")
	certPEM, keyPEM := issueTestCert(t, ca, caKey, metricsServerName)
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for path, data := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p := env.StartControllerWith(t, localcluster.ControllerOptions{SecureMetrics: true,
		Args: []string{"--namespace=" + ns, "--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile}})

	scraper, err := os.ReadFile(filepath.Join(env.RepoRoot, "artifacts", "deploy", "components", "prometheus", "scraper.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// In the test's namespace, under a binding name of its own.
	manifest := strings.ReplaceAll(string(scraper), "namespace: sample-controller-system", "namespace: "+ns)
	manifest = strings.Replace(manifest, "kind: ClusterRoleBinding\nmetadata:\n  name: sample-controller-metrics-scraper",
		"kind: ClusterRoleBinding\nmetadata:\n  name: "+ns+"-metrics-scraper", 1)
	env.KubectlIn(t, manifest, "apply", "-f", "-")
	t.Cleanup(func() {
		_ = env.Kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), ns+"-metrics-scraper", metav1.DeleteOptions{})
	})
	var token string
	framework.Eventually(t, timeout, "the token controller to fill the scraper's Secret", func(ctx context.Context) (bool, string) {
		s, err := env.Kube.CoreV1().Secrets(ns).Get(ctx, "sample-controller-metrics-scraper-token", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		token = string(s.Data["token"])
		return token != "", "no token yet"
	})

	scrape := func(ctx context.Context, roots *x509.CertPool, serverName string) (int, string, error) {
		client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12},
		}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.MetricsURL, nil)
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), err
	}
	trusted := x509.NewCertPool()
	trusted.AddCert(ca)
	// A refusal is cached for 10 s, and the binding takes a moment to reach the
	// authorizer: poll.
	framework.Eventually(t, timeout, "a verified scrape with the scraper's token", func(ctx context.Context) (bool, string) {
		code, body, err := scrape(ctx, trusted, metricsServerName)
		return code == http.StatusOK && strings.Contains(body, "sample_controller_build_info"), fmt.Sprintf("%d %.200q %v", code, body, err)
	})

	// Verification is what it checks: another CA, or another name, is refused.
	other, _ := newTestCA(t, "another-ca")
	untrusted := x509.NewCertPool()
	untrusted.AddCert(other)
	var unknownAuthority x509.UnknownAuthorityError
	if _, _, err := scrape(ctx, untrusted, metricsServerName); !errors.As(err, &unknownAuthority) {
		t.Errorf("a scrape trusting another CA: %v, want an unknown authority", err)
	}
	var wrongName x509.HostnameError
	if _, _, err := scrape(ctx, trusted, "sample-controller-metrics.elsewhere.svc"); !errors.As(err, &wrongName) {
		t.Errorf("a scrape for another name: %v, want a hostname error", err)
	}
}

// newTestCA returns a self-signed CA certificate and its key.
func newTestCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	return signTestCert(t, &x509.Certificate{
		Subject:               pkix.Name{CommonName: name},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
}

// issueTestCert returns a serving certificate for dnsName issued by ca, and its key,
// PEM-encoded; the certificate is followed by the CA's, as cert-manager writes tls.crt.
func issueTestCert(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, dnsName string) (certPEM, keyPEM []byte) {
	t.Helper()
	cert, key := signTestCert(t, &x509.Certificate{
		Subject:     pkix.Name{CommonName: dnsName},
		DNSNames:    []string{dnsName},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, caKey)
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	var chain bytes.Buffer
	for _, d := range [][]byte{cert.Raw, ca.Raw} {
		if err := pem.Encode(&chain, &pem.Block{Type: "CERTIFICATE", Bytes: d}); err != nil {
			t.Fatal(err)
		}
	}
	return chain.Bytes(), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// signTestCert gives tmpl a new key, a serial and an hour's validity, and signs it
// with parent's key, or with its own when parent is nil.
func signTestCert(t *testing.T, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = big.NewInt(time.Now().UnixNano())
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}
