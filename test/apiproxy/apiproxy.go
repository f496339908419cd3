// Package apiproxy puts a recording, stallable proxy between one client and a
// kube-apiserver, for the fault suite: it records every write the client makes, runs a
// hook between a write's commit and the client learning of it, and can hold (Stall,
// Release) or cut (Cut) the client's traffic.
package apiproxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// Proxy is a TLS reverse proxy in front of a kube-apiserver, for fault tests: a
// test hands a client (a controller) the proxy's address instead of the apiserver's,
// and then sees every write the client makes, can act right after one has been
// committed and before the client learns it, can hold all of the client's traffic,
// and can cut its connections.
//
// The proxy forwards the Authorization header as it came, so a client that
// authenticates with a bearer token is the same user through it; a client
// certificate, which TLS does not forward, is not. Give each client its own proxy to
// tell their writes apart.
type Proxy struct {
	name     string
	url      string
	server   *http.Server
	listener net.Listener
	proxy    *httputil.ReverseProxy
	upstream *http.Transport

	// hookMu serialises the writes' recording and afterWrite, so that the k-th write
	// is well defined and a hook sees them one at a time.
	hookMu sync.Mutex

	mu          sync.Mutex
	writes      []Write
	beforeWrite func(Write)
	afterWrite  func(Write)
	conns       map[net.Conn]struct{}
	// stalled is open while traffic is held; Release closes it. held counts what
	// waits on it.
	stalled chan struct{}
	held    int
	// lagging is the resource whose watches deliver nothing until ReleaseWatches,
	// and laggingReleased closes when it does.
	lagging         string
	laggingReleased chan struct{}
	// heldWatches counts the watches that have an event held now.
	heldWatches int
	closed      chan struct{}
	once        sync.Once
}

// Write is one write (a request other than GET and HEAD) that went through the
// proxy, and the apiserver's answer.
type Write struct {
	// Client is the proxy's name; UserAgent is what the client sent.
	Client    string
	UserAgent string
	Method    string
	// Group is empty for the core group. Name is the object's: from the path, or for
	// a create from the object sent.
	Group, Resource, Subresource string
	Namespace, Name              string
	// ResourceVersion is the one the object or patch sent carried: the write's
	// precondition.
	ResourceVersion string
	// Code is the answer's HTTP status; 502 with Err when the apiserver gave none.
	Code int
	Err  string

	// Received is when the proxy had the whole request, Sent when it forwarded it
	// (later while traffic is stalled), Answered when the answer came back.
	Received, Sent, Answered time.Time
}

// String is one line for a test log: when it was answered, by whom, what, and the
// answer's status.
func (w Write) String() string {
	resource := w.Resource
	if w.Group != "" {
		resource += "." + w.Group
	}
	if w.Subresource != "" {
		resource += "/" + w.Subresource
	}
	return fmt.Sprintf("%s %s %s %s %s %d", w.Answered.Format("15:04:05.000"), w.Client, w.Method, resource, w.Name, w.Code)
}

// Options says where the proxy forwards to and how it serves.
type Options struct {
	// Name tags the writes (Write.Client).
	Name string
	// Upstream is the apiserver's https URL; UpstreamCA, PEM encoded, verifies it.
	Upstream   string
	UpstreamCA []byte
	// Certificate is what the proxy serves with. For clients to keep their kubeconfig's
	// CA data, the same CA must have signed it, for 127.0.0.1.
	Certificate tls.Certificate
}

// Start starts a proxy on a free port of 127.0.0.1. It serves until Close;
// ctx bounds only the start.
func Start(ctx context.Context, opts Options) (*Proxy, error) {
	upstream, err := url.Parse(opts.Upstream)
	if err != nil {
		return nil, fmt.Errorf("apiserver URL %q: %w", opts.Upstream, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(opts.UpstreamCA) {
		return nil, errors.New("no certificate in the apiserver's CA data")
	}
	listener, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("starting the API proxy %s: %w", opts.Name, err)
	}
	p := &Proxy{
		name:     opts.Name,
		url:      "https://" + listener.Addr().String(),
		listener: listener,
		upstream: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots},
			ForceAttemptHTTP2: true,
		},
		conns:  map[net.Conn]struct{}{},
		closed: make(chan struct{}),
	}
	p.proxy = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(upstream) },
		// Watches are streams of events: each goes to the client as it arrives.
		FlushInterval:  -1,
		Transport:      p.upstream,
		ModifyResponse: p.answered,
		ErrorHandler:   p.failed,
		// A client gone in the middle of an answer is what these tests do.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	p.server = &http.Server{
		Handler:   p,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{opts.Certificate}},
		ConnState: p.track,
		ErrorLog:  log.New(io.Discard, "", 0),
	}
	go func() { _ = p.server.ServeTLS(listener, "", "") }()
	return p, nil
}

// StartForCluster starts a proxy in front of the local cluster's apiserver. It serves
// with the cluster's serving certificate, so a kubeconfig of this cluster verifies it
// as is. It serves until Close; ctx bounds only the start.
func StartForCluster(ctx context.Context, cluster *localcluster.Cluster, name string) (*Proxy, error) {
	certFile, keyFile := cluster.ServingCert()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the serving certificate for the API proxy: %w", err)
	}
	cfg := cluster.RESTConfig()
	return Start(ctx, Options{
		Name:        name,
		Upstream:    cfg.Host,
		UpstreamCA:  cfg.CAData,
		Certificate: cert,
	})
}

// URL is the proxy's https address.
func (p *Proxy) URL() string { return p.url }

// Name is Options.Name.
func (p *Proxy) Name() string { return p.name }

// WriteKubeconfig copies the kubeconfig from to to, with the proxy as every cluster's
// server and nothing else changed.
func (p *Proxy) WriteKubeconfig(from, to string) error {
	cfg, err := clientcmd.LoadFromFile(from)
	if err != nil {
		return err
	}
	for _, cluster := range cfg.Clusters {
		cluster.Server = p.url
	}
	return clientcmd.WriteToFile(*cfg, to)
}

// Writes returns the writes answered so far, in the order their answers came back.
func (p *Proxy) Writes() []Write {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Write(nil), p.writes...)
}

// AfterWrite sets a hook, nil for none, that runs for every write once the apiserver
// has answered and before the client gets the answer; the client gets it once hook
// returns. Hooks run one at a time, in the order of Writes.
func (p *Proxy) AfterWrite(hook func(Write)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.afterWrite = hook
}

// BeforeWrite sets a hook, nil for none, that runs for every write once the proxy has
// it whole and before it is forwarded: a hook that calls Stall holds that very write,
// as a write on the wire when its writer lost the right to make it. The record it gets
// has no Sent, Answered or Code yet.
func (p *Proxy) BeforeWrite(hook func(Write)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.beforeWrite = hook
}

// Stall holds all traffic until Release: new requests are not forwarded, answers are
// not returned, and open watches deliver nothing more. A write that reached the proxy
// is forwarded on Release even if its client has gone meanwhile, as bytes already on
// the wire would be; a read of a client that has gone is dropped.
func (p *Proxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// Held is the number of requests, answers and watch streams held now.
func (p *Proxy) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held
}

// Release lets the held traffic through.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// HoldWatches holds the event streams of the client's watches of resource (as its
// paths name it: "foos"), open or yet to open, until ReleaseWatches. They stay open and
// deliver nothing, as a watch behind a slow link or a lagging watch cache does, while
// every other request goes through, reads of the same resource included.
func (p *Proxy) HoldWatches(resource string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lagging == "" {
		p.laggingReleased = make(chan struct{})
	}
	p.lagging = resource
}

// ReleaseWatches lets the watches HoldWatches held deliver what they hold, and what
// comes after.
func (p *Proxy) ReleaseWatches() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lagging != "" {
		close(p.laggingReleased)
		p.lagging = ""
	}
}

// HeldWatches is the number of watches whose next event HoldWatches holds now.
func (p *Proxy) HeldWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.heldWatches
}

// watchReleased returns once the watches of resource are not held, or with an error
// when ctx ends or the proxy closes first.
func (p *Proxy) watchReleased(ctx context.Context, resource string) error {
	p.mu.Lock()
	var released chan struct{}
	if p.lagging == resource {
		released = p.laggingReleased
		p.heldWatches++
	}
	p.mu.Unlock()
	return p.await(ctx, released, &p.heldWatches)
}

// await returns once released closes, at once for a nil one, or with an error when ctx
// ends or the proxy closes first; meanwhile the wait counts in *held, which the caller
// counted it in when it read released.
func (p *Proxy) await(ctx context.Context, released <-chan struct{}, held *int) error {
	if released == nil {
		return nil
	}
	defer func() {
		p.mu.Lock()
		*held--
		p.mu.Unlock()
	}()
	select {
	case <-released:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-p.closed:
		return http.ErrServerClosed
	}
}

// Cut closes every client connection open now, watches included, and returns how
// many. Writes already forwarded still get their answer from the apiserver.
func (p *Proxy) Cut() int {
	p.mu.Lock()
	conns := make([]net.Conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	p.upstream.CloseIdleConnections()
	return len(conns)
}

// Close stops the proxy and closes its connections; held requests are dropped.
func (p *Proxy) Close() error {
	p.once.Do(func() { close(p.closed) })
	err := p.server.Close()
	p.upstream.CloseIdleConnections()
	return err
}

func (p *Proxy) track(c net.Conn, state http.ConnState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch state {
	case http.StateNew:
		p.conns[c] = struct{}{}
	case http.StateClosed, http.StateHijacked:
		delete(p.conns, c)
	}
}

// waitReleased returns once traffic is not stalled, or with an error when ctx ends or
// the proxy closes first.
func (p *Proxy) waitReleased(ctx context.Context) error {
	p.mu.Lock()
	stalled := p.stalled
	if stalled != nil {
		p.held++
	}
	p.mu.Unlock()
	return p.await(ctx, stalled, &p.held)
}

// writeKey carries a write's record through the reverse proxy, from ServeHTTP to
// answered or failed.
type writeKey struct{}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		if err := p.waitReleased(r.Context()); err != nil {
			return
		}
		p.proxy.ServeHTTP(headerFlusher{w}, r)
		return
	}

	// A write is read whole and then forwarded however its client fares, so that it
	// is either never sent or committed with its answer recorded.
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	record := &Write{Client: p.name, UserAgent: r.UserAgent(), Method: r.Method, Received: time.Now()}
	record.Group, record.Namespace, record.Resource, record.Name, record.Subresource = parseResourcePath(r.URL.Path)
	meta := objectMeta(r.Header.Get("Content-Type"), body)
	if record.Name == "" {
		record.Name = meta.Name
	}
	record.ResourceVersion = meta.ResourceVersion
	ctx := context.WithValue(context.WithoutCancel(r.Context()), writeKey{}, record)
	p.mu.Lock()
	before := p.beforeWrite
	p.mu.Unlock()
	if before != nil {
		before(*record)
	}
	if err := p.waitReleased(ctx); err != nil {
		return
	}
	record.Sent = time.Now()
	r = r.WithContext(ctx)
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	p.proxy.ServeHTTP(headerFlusher{w}, r)
}

// headerFlusher sends the headers of an answer as soon as they are written: a watch
// gets them from the apiserver at once, and its client waits for them before it
// reads events. It hides the CloseNotifier of the ResponseWriter, so that the reverse
// proxy does not cancel a write when its client goes away, and keeps its Flusher
// reachable through Unwrap.
type headerFlusher struct{ http.ResponseWriter }

func (w headerFlusher) WriteHeader(code int) {
	w.ResponseWriter.WriteHeader(code)
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w headerFlusher) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// answered runs when the apiserver's answer has come: it records a write and runs the
// hook, then holds the answer while traffic is stalled.
func (p *Proxy) answered(resp *http.Response) error {
	ctx := resp.Request.Context()
	if record, ok := ctx.Value(writeKey{}).(*Write); ok {
		record.Answered = time.Now()
		record.Code = resp.StatusCode
		p.record(*record)
	}
	if err := p.waitReleased(ctx); err != nil {
		return err
	}
	body := &stallableBody{ReadCloser: resp.Body, ctx: ctx, p: p}
	if watch := resp.Request.URL.Query().Get("watch"); watch == "true" || watch == "1" {
		_, _, body.watched, _, _ = parseResourcePath(resp.Request.URL.Path)
	}
	resp.Body = body
	return nil
}

// failed answers 502 when the apiserver could not be reached or gave no answer, and
// records a write that failed so.
func (p *Proxy) failed(w http.ResponseWriter, r *http.Request, err error) {
	if record, ok := r.Context().Value(writeKey{}).(*Write); ok {
		record.Answered = time.Now()
		record.Code = http.StatusBadGateway
		record.Err = err.Error()
		p.record(*record)
	}
	w.WriteHeader(http.StatusBadGateway)
}

func (p *Proxy) record(w Write) {
	p.hookMu.Lock()
	defer p.hookMu.Unlock()
	p.mu.Lock()
	p.writes = append(p.writes, w)
	hook := p.afterWrite
	p.mu.Unlock()
	if hook != nil {
		hook(w)
	}
}

// stallableBody is an answer's body, a watch's stream of events among them, that
// delivers nothing while traffic is stalled, nor, for a watch, while the watches of
// its resource are held.
type stallableBody struct {
	io.ReadCloser
	ctx context.Context
	p   *Proxy
	// watched is the resource of a watch; empty for any other answer.
	watched string
}

func (b *stallableBody) Read(data []byte) (int, error) {
	if err := b.p.waitReleased(b.ctx); err != nil {
		return 0, err
	}
	n, err := b.ReadCloser.Read(data)
	if b.watched != "" {
		// The proxy waits in Read for a watch's next event, so the hold is checked
		// once it has come: an event that arrives after HoldWatches is held.
		if err := b.p.watchReleased(b.ctx, b.watched); err != nil {
			return 0, err
		}
	}
	return n, err
}

// parseResourcePath reads an API path, /api/v1/... or /apis/<group>/<version>/...,
// followed by [namespaces/<namespace>/]<resource>[/<name>[/<subresource>]]. Other
// paths give empty strings.
func parseResourcePath(path string) (group, namespace, resource, name, subresource string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 4 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	default:
		return "", "", "", "", ""
	}
	// namespaces/<name> alone is a Namespace; followed by more, it scopes them.
	if len(parts) >= 3 && parts[0] == "namespaces" {
		namespace, parts = parts[1], parts[2:]
	}
	resource = parts[0]
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		subresource = strings.Join(parts[2:], "/")
	}
	return group, namespace, resource, name, subresource
}

// protobufPrefix starts every protobuf-encoded Kubernetes object.
var protobufPrefix = []byte("k8s\x00")

// objectMeta reads the metadata of an object or patch in JSON, or of an object in
// Kubernetes protobuf; it is empty for anything else.
func objectMeta(contentType string, body []byte) metav1.ObjectMeta {
	var object metav1.PartialObjectMetadata
	if strings.HasPrefix(contentType, runtime.ContentTypeProtobuf) {
		var envelope runtime.Unknown
		if !bytes.HasPrefix(body, protobufPrefix) || envelope.Unmarshal(body[len(protobufPrefix):]) != nil {
			return metav1.ObjectMeta{}
		}
		// Every object carries its ObjectMeta as field 1, as PartialObjectMetadata
		// does; the rest is skipped.
		if object.Unmarshal(envelope.Raw) != nil {
			return metav1.ObjectMeta{}
		}
		return object.ObjectMeta
	}
	if json.Unmarshal(body, &object) != nil {
		return metav1.ObjectMeta{}
	}
	return object.ObjectMeta
}
