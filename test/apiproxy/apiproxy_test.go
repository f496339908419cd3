package apiproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// fakeAPIServer stands in for a kube-apiserver: it answers a create with the object
// sent, other writes with an empty object, streams watches one line at a time, and
// remembers what reached it.
type fakeAPIServer struct {
	*httptest.Server
	// nextEvent sends a watch its next line; closing it ends the watch.
	nextEvent chan string

	mu       sync.Mutex
	requests []string // method and path, in order of arrival
	tokens   []string // the Authorization headers
}

func newFakeAPIServer(t *testing.T) *fakeAPIServer {
	f := &fakeAPIServer{nextEvent: make(chan string)}
	f.Server = httptest.NewTLSServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeAPIServer) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Method+" "+r.URL.Path)
	f.tokens = append(f.tokens, r.Header.Get("Authorization"))
	f.mu.Unlock()
	// The write errors are ignored: they mean that the client went away (a watch that
	// was cut, a client that gave up), which is what these tests do.
	switch {
	case r.URL.Query().Get("watch") == "true":
		// As the apiserver does, the headers go out before the first event.
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		for line := range f.nextEvent {
			_, _ = io.WriteString(w, line+"\n")
			w.(http.Flusher).Flush()
		}
	case r.Method == http.MethodPost:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.Copy(w, r.Body)
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{}`)
	}
}

func (f *fakeAPIServer) seen() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.requests...)
}

// startTestProxy starts a proxy to upstream that serves upstream's own certificate, as
// StartForCluster serves the apiserver's, and returns it with a client that trusts that
// certificate.
func startTestProxy(t *testing.T, upstream *httptest.Server) (*Proxy, *http.Client) {
	t.Helper()
	upstreamCA := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: upstream.Certificate().Raw})
	p, err := Start(t.Context(), Options{Name: "test", Upstream: upstream.URL, UpstreamCA: upstreamCA, Certificate: upstream.TLS.Certificates[0]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })

	roots := x509.NewCertPool()
	roots.AddCert(upstream.Certificate())
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	t.Cleanup(client.CloseIdleConnections)
	return p, client
}

// do sends a request with a bearer token through the proxy and returns the status
// and the body.
func do(ctx context.Context, client *http.Client, p *Proxy, method, path, body string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, method, p.URL()+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer secret-token")
	req.Header.Set("User-Agent", "proxy-test/1.0")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data), err
}

func TestAPIProxyRecordsWrites(t *testing.T) {
	upstream := newFakeAPIServer(t)
	p, client := startTestProxy(t, upstream.Server)

	requests := []struct{ method, path string }{
		{http.MethodGet, "/apis/apps/v1/namespaces/ns/deployments"},
		{http.MethodPost, "/apis/apps/v1/namespaces/ns/deployments"},
		{http.MethodPut, "/apis/samplecontroller.k8s.io/v1alpha1/namespaces/ns/foos/foo/status"},
		{http.MethodDelete, "/apis/apps/v1/namespaces/ns/deployments/old"},
		{http.MethodPost, "/api/v1/namespaces/ns/events"},
		{http.MethodPatch, "/api/v1/namespaces/ns"},
	}
	const object = `{"kind":"Deployment","metadata":{"name":"created","namespace":"ns"}}`
	for _, r := range requests {
		if code, body, err := do(t.Context(), client, p, r.method, r.path, object); err != nil || code >= 300 {
			t.Fatalf("%s %s: %d %s %v", r.method, r.path, code, body, err)
		}
	}

	upstream.mu.Lock()
	for _, token := range upstream.tokens {
		if token != "Bearer secret-token" {
			t.Errorf("the apiserver got Authorization %q, want the client's", token)
		}
	}
	upstream.mu.Unlock()

	want := []Write{
		{Method: "POST", Group: "apps", Resource: "deployments", Namespace: "ns", Name: "created", Code: 201},
		{Method: "PUT", Group: "samplecontroller.k8s.io", Resource: "foos", Subresource: "status", Namespace: "ns", Name: "foo", Code: 200},
		{Method: "DELETE", Group: "apps", Resource: "deployments", Namespace: "ns", Name: "old", Code: 200},
		{Method: "POST", Resource: "events", Namespace: "ns", Name: "created", Code: 201},
		{Method: "PATCH", Resource: "namespaces", Name: "ns", Code: 200},
	}
	for i := range want {
		want[i].Client, want[i].UserAgent = "test", "proxy-test/1.0"
	}
	got := p.Writes()
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(Write{}, "Received", "Sent", "Answered")); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	for _, w := range got {
		if w.Received.After(w.Sent) || w.Sent.After(w.Answered) {
			t.Errorf("%v: received %v, sent %v, answered %v, want them in that order", w, w.Received, w.Sent, w.Answered)
		}
	}
}

func TestAPIProxyHookRunsBetweenCommitAndAnswer(t *testing.T) {
	upstream := newFakeAPIServer(t)
	p, client := startTestProxy(t, upstream.Server)

	// What the hook saw, sent from the hook's goroutine.
	type sight struct {
		upstream        []string
		clientHadAnswer bool
	}
	sights := make(chan sight, 1)
	answered := make(chan struct{})
	p.AfterWrite(func(Write) {
		s := sight{upstream: upstream.seen()}
		select {
		case <-answered:
			s.clientHadAnswer = true
		default:
		}
		sights <- s
	})
	_, _, err := do(t.Context(), client, p, http.MethodPut, "/apis/apps/v1/namespaces/ns/deployments/web", "{}")
	close(answered)
	if err != nil {
		t.Fatal(err)
	}
	s := <-sights
	if want := []string{"PUT /apis/apps/v1/namespaces/ns/deployments/web"}; !cmp.Equal(s.upstream, want) {
		t.Errorf("when the hook ran, the apiserver had seen %v, want %v", s.upstream, want)
	}
	if s.clientHadAnswer {
		t.Error("the client had its answer before the hook ran")
	}
}

// watchDeployments opens a watch of Deployments through the proxy.
func watchDeployments(t *testing.T, client *http.Client, p *Proxy) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, p.URL()+"/apis/apps/v1/deployments?watch=true", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestAPIProxyStreamsAndCutsWatches(t *testing.T) {
	upstream := newFakeAPIServer(t)
	p, client := startTestProxy(t, upstream.Server)

	resp := watchDeployments(t, client, p)
	defer resp.Body.Close()
	lines := bufio.NewReader(resp.Body)
	// Each event must reach the client while the apiserver still holds the stream.
	for _, event := range []string{`{"type":"ADDED"}`, `{"type":"MODIFIED"}`} {
		upstream.nextEvent <- event
		line, err := lines.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != event {
			t.Fatalf("read %q, %v; want %s", line, err, event)
		}
	}

	if n := p.Cut(); n != 1 {
		t.Errorf("Cut closed %d connections, want 1", n)
	}
	if line, err := lines.ReadString('\n'); err == nil {
		t.Errorf("the watch went on after Cut: %q", line)
	}
	close(upstream.nextEvent)
	if len(p.Writes()) != 0 {
		t.Errorf("a watch was recorded as a write: %v", p.Writes())
	}
}

// TestAPIProxyHoldWatchesDelaysOneResource checks that HoldWatches holds the events of
// the watches of one resource, open before it, and nothing else: another request for
// the same resource is answered meanwhile, and the held event comes once the watches
// are released.
func TestAPIProxyHoldWatchesDelaysOneResource(t *testing.T) {
	upstream := newFakeAPIServer(t)
	p, client := startTestProxy(t, upstream.Server)
	// Ends the watch, on failure too, so that the fake API server can close.
	defer close(upstream.nextEvent)

	resp := watchDeployments(t, client, p)
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	lines := make(chan string, 2)
	go func() {
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			lines <- strings.TrimSpace(line)
		}
	}()
	// Before the hold, an event goes through; the proxy then waits for the next.
	upstream.nextEvent <- `{"type":"ADDED"}`
	if line := <-lines; line != `{"type":"ADDED"}` {
		t.Fatalf("before the hold the watch delivered %q", line)
	}

	p.HoldWatches("deployments")
	upstream.nextEvent <- `{"type":"MODIFIED"}`
	if code, _, err := do(t.Context(), client, p, http.MethodGet, "/apis/apps/v1/namespaces/ns/deployments/web", ""); err != nil || code != http.StatusOK {
		t.Fatalf("a read of the held resource: %d, %v; want it answered", code, err)
	}
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return p.HeldWatches() == 1, nil
	})
	if err != nil {
		t.Fatalf("no watch held its event: %d held", p.HeldWatches())
	}
	// The read was answered after the event reached the proxy: had the watch not been
	// held, the event would be with the client by now, give or take a scheduling delay.
	select {
	case line := <-lines:
		t.Fatalf("the held watch delivered %q", line)
	case <-time.After(200 * time.Millisecond):
	}
	p.ReleaseWatches()
	select {
	case line := <-lines:
		if line != `{"type":"MODIFIED"}` {
			t.Errorf("after ReleaseWatches the watch delivered %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watch delivered nothing after ReleaseWatches")
	}
}

func TestAPIProxyStallHoldsTraffic(t *testing.T) {
	upstream := newFakeAPIServer(t)
	p, client := startTestProxy(t, upstream.Server)

	p.Stall()
	ctx, giveUp := context.WithCancel(t.Context())
	var clients sync.WaitGroup
	for _, method := range []string{http.MethodGet, http.MethodPut} {
		clients.Go(func() {
			_, _, err := do(ctx, client, p, method, "/apis/apps/v1/namespaces/ns/deployments/web", "{}")
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s while stalled: %v, want it held until the client gives up", method, err)
			}
		})
	}
	waitHeld(t, p, 2)
	if seen := upstream.seen(); len(seen) != 0 {
		t.Errorf("the apiserver got %v while the proxy was stalled", seen)
	}

	// Both clients give up: the held write is on the wire and still goes through, the
	// held read has no one to answer.
	giveUp()
	clients.Wait()
	p.Release()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(p.Writes()) == 1 && p.Held() == 0, nil
	})
	if err != nil {
		t.Fatalf("after Release: writes %v, %d held", p.Writes(), p.Held())
	}
	if want := []string{"PUT /apis/apps/v1/namespaces/ns/deployments/web"}; !cmp.Equal(upstream.seen(), want) {
		t.Errorf("after Release the apiserver got %v, want %v", upstream.seen(), want)
	}
	if w := p.Writes()[0]; w.Sent.Sub(w.Received) <= 0 {
		t.Errorf("held write: received %v, sent %v", w.Received, w.Sent)
	}
}

// TestAPIProxyBeforeWriteHoldsTheWrite checks that a hook before a write that stalls
// the proxy holds that very write until Release, and that the hook sees it.
func TestAPIProxyBeforeWriteHoldsTheWrite(t *testing.T) {
	upstream := newFakeAPIServer(t)
	p, client := startTestProxy(t, upstream.Server)
	var seen []Write
	p.BeforeWrite(func(w Write) {
		seen = append(seen, w)
		p.Stall()
	})
	done := make(chan error, 1)
	go func() {
		_, _, err := do(t.Context(), client, p, http.MethodPut, "/apis/apps/v1/namespaces/ns/deployments/web", "{}")
		done <- err
	}()
	waitHeld(t, p, 1)
	if got := upstream.seen(); len(got) != 0 {
		t.Errorf("the apiserver got %v before Release", got)
	}
	if len(seen) != 1 || seen[0].Resource != "deployments" || seen[0].Name != "web" || !seen[0].Sent.IsZero() {
		t.Errorf("the hook saw %v, want the write to web, not yet sent", seen)
	}
	p.BeforeWrite(nil)
	p.Release()
	if err := <-done; err != nil {
		t.Fatalf("the held write after Release: %v", err)
	}
	if want := []string{"PUT /apis/apps/v1/namespaces/ns/deployments/web"}; !cmp.Equal(upstream.seen(), want) {
		t.Errorf("after Release the apiserver got %v, want %v", upstream.seen(), want)
	}
}

// waitHeld waits until the proxy holds n requests.
func waitHeld(t *testing.T, p *Proxy, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return p.Held() == n, nil
	})
	if err != nil {
		t.Fatalf("the proxy holds %d requests, want %d", p.Held(), n)
	}
}

func TestAPIProxyKubeconfig(t *testing.T) {
	upstream := newFakeAPIServer(t)
	p, _ := startTestProxy(t, upstream.Server)
	dir := t.TempDir()
	from, to := filepath.Join(dir, "from"), filepath.Join(dir, "to")
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: upstream.URL, CertificateAuthorityData: []byte("ca data")}
	cfg.AuthInfos["local"] = &clientcmdapi.AuthInfo{ClientCertificateData: []byte("cert"), ClientKeyData: []byte("key")}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "local"}
	cfg.CurrentContext = "local"
	if err := clientcmd.WriteToFile(*cfg, from); err != nil {
		t.Fatal(err)
	}
	if err := p.WriteKubeconfig(from, to); err != nil {
		t.Fatal(err)
	}
	before, err := clientcmd.LoadFromFile(from)
	if err != nil {
		t.Fatal(err)
	}
	after, err := clientcmd.LoadFromFile(to)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range before.Clusters {
		c.Server = p.URL()
	}
	// LocationOfOrigin is where each part was read from.
	ignoreOrigin := cmpopts.IgnoreFields(clientcmdapi.Cluster{}, "LocationOfOrigin")
	ignoreAuthOrigin := cmpopts.IgnoreFields(clientcmdapi.AuthInfo{}, "LocationOfOrigin")
	ignoreContextOrigin := cmpopts.IgnoreFields(clientcmdapi.Context{}, "LocationOfOrigin")
	if diff := cmp.Diff(before, after, ignoreOrigin, ignoreAuthOrigin, ignoreContextOrigin); diff != "" {
		t.Errorf("the copy differs in more than the server (-want +got):\n%s", diff)
	}
}

func TestParseResourcePath(t *testing.T) {
	tests := []struct {
		path                                          string
		group, namespace, resource, name, subresource string
	}{
		{path: "/api/v1/namespaces/ns/pods/p/log", namespace: "ns", resource: "pods", name: "p", subresource: "log"},
		{path: "/api/v1/namespaces/ns", resource: "namespaces", name: "ns"},
		{path: "/api/v1/namespaces", resource: "namespaces"},
		{path: "/api/v1/nodes/n/status", resource: "nodes", name: "n", subresource: "status"},
		{path: "/apis/apps/v1/namespaces/ns/deployments", group: "apps", namespace: "ns", resource: "deployments"},
		{path: "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l", group: "coordination.k8s.io", namespace: "ns", resource: "leases", name: "l"},
		{path: "/healthz"},
	}
	for _, tc := range tests {
		group, namespace, resource, name, subresource := parseResourcePath(tc.path)
		got := []string{group, namespace, resource, name, subresource}
		if want := []string{tc.group, tc.namespace, tc.resource, tc.name, tc.subresource}; !cmp.Equal(got, want) {
			t.Errorf("parseResourcePath(%q) = %q, want %q", tc.path, got, want)
		}
	}
}

func TestObjectMeta(t *testing.T) {
	deployment := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "ns", ResourceVersion: "7", Labels: map[string]string{"a": "b"}}}
	raw, err := deployment.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	envelope, err := (&runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"}, Raw: raw}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		what, contentType string
		body              []byte
		name, version     string
	}{
		{what: "JSON", contentType: "application/json", body: []byte(`{"metadata":{"name":"web"}}`), name: "web"},
		{what: "protobuf", contentType: runtime.ContentTypeProtobuf, body: append([]byte("k8s\x00"), envelope...), name: "web", version: "7"},
		{what: "protobuf without its prefix", contentType: runtime.ContentTypeProtobuf, body: envelope},
		{what: "not an object", contentType: "application/json", body: []byte(`[1]`)},
		{what: "a patch with its precondition", contentType: "application/strategic-merge-patch+json", body: []byte(`{"metadata":{"resourceVersion":"42"},"spec":{"replicas":2}}`), version: "42"},
	}
	for _, tc := range tests {
		got := objectMeta(tc.contentType, tc.body)
		if got.Name != tc.name || got.ResourceVersion != tc.version {
			t.Errorf("%s: objectMeta gave name %q and resourceVersion %q, want %q and %q", tc.what, got.Name, got.ResourceVersion, tc.name, tc.version)
		}
	}
}
