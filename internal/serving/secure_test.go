package serving

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/klog/v2"
)

// tokens are the callers the fake authenticator knows.
var tokens = map[string]string{"scraper-token": "system:serviceaccount:monitoring:prometheus", "other-token": "system:serviceaccount:default:other"}

// fakeAuthenticator authenticates the bearer tokens above, and fails on "broken".
var fakeAuthenticator = authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
	token, found := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !found {
		return nil, false, nil
	}
	if token == "broken" {
		return nil, false, errors.New("tokenreviews: connection refused")
	}
	name, ok := tokens[token]
	if !ok {
		return nil, false, errors.New("invalid bearer token")
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: name}}, true, nil
})

// recordingAuthorizer allows the scraper to get /metrics, fails for the path /broken,
// and records what it was asked.
type recordingAuthorizer struct{ asked []string }

func (a *recordingAuthorizer) Authorize(_ context.Context, attrs authorizer.Attributes) (authorizer.Decision, string, error) {
	a.asked = append(a.asked, fmt.Sprintf("%s %s %s resource=%v", attrs.GetUser().GetName(), attrs.GetVerb(), attrs.GetPath(), attrs.IsResourceRequest()))
	switch {
	case attrs.GetPath() == "/broken":
		return authorizer.DecisionNoOpinion, "", errors.New("subjectaccessreviews: connection refused")
	case attrs.GetUser().GetName() == tokens["scraper-token"] && attrs.GetVerb() == "get" && attrs.GetPath() == "/metrics":
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no RBAC policy matched", nil
}

func TestHandler(t *testing.T) {
	const scraper = "system:serviceaccount:monitoring:prometheus"
	tests := []struct {
		name      string
		method    string
		path      string
		token     string
		want      int
		wantAsked []string
	}{
		{"no token", http.MethodGet, "/metrics", "", http.StatusUnauthorized, nil},
		{"a token the API server does not know", http.MethodGet, "/metrics", "stolen", http.StatusUnauthorized, nil},
		{"the token review fails", http.MethodGet, "/metrics", "broken", http.StatusUnauthorized, nil},
		{"a caller without the role", http.MethodGet, "/metrics", "other-token", http.StatusForbidden,
			[]string{"system:serviceaccount:default:other get /metrics resource=false"}},
		{"a caller with the role", http.MethodGet, "/metrics", "scraper-token", http.StatusOK,
			[]string{scraper + " get /metrics resource=false"}},
		{"the role is for one path", http.MethodGet, "/debug/pprof/heap", "scraper-token", http.StatusForbidden,
			[]string{scraper + " get /debug/pprof/heap resource=false"}},
		{"the role is for one verb", http.MethodPost, "/metrics", "scraper-token", http.StatusForbidden,
			[]string{scraper + " post /metrics resource=false"}},
		{"the access review fails", http.MethodGet, "/broken", "scraper-token", http.StatusInternalServerError,
			[]string{scraper + " get /broken resource=false"}},
		{"an always-allowed path needs no token", http.MethodGet, "/healthz", "", http.StatusOK, nil},
		{"an always-allowed prefix", http.MethodGet, "/public/anything", "", http.StatusOK, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			alwaysAllow, err := path.NewAuthorizer([]string{"/healthz", "/public/*"})
			if err != nil {
				t.Fatal(err)
			}
			authz := &recordingAuthorizer{}
			s := &Secure{alwaysAllow: alwaysAllow, authenticator: fakeAuthenticator, authorizer: authorizer.AuthorizerFunc(authz.Authorize), logger: klog.Background()}
			served := false
			handler := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { served = true }))

			req := httptest.NewRequestWithContext(t.Context(), tt.method, tt.path, nil)
			if tt.token != "" {
				req.Header.Set("Authorization", "Bearer "+tt.token)
			}
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("%s %s: status %d, want %d (body %q)", tt.method, tt.path, rec.Code, tt.want, rec.Body.String())
			}
			if served != (tt.want == http.StatusOK) {
				t.Errorf("the handler ran: %v, want %v", served, tt.want == http.StatusOK)
			}
			if !slices.Equal(authz.asked, tt.wantAsked) {
				t.Errorf("asked the authorizer %q, want %q", authz.asked, tt.wantAsked)
			}
		})
	}
}

func TestForbiddenSaysWhoAndWhat(t *testing.T) {
	alwaysAllow, _ := path.NewAuthorizer(nil)
	s := &Secure{alwaysAllow: alwaysAllow, authenticator: fakeAuthenticator, authorizer: authorizer.AuthorizerFunc((&recordingAuthorizer{}).Authorize), logger: klog.Background()}
	req := httptest.NewRequestWithContext(t.Context(), http.MethodGet, "/metrics", nil)
	req.Header.Set("Authorization", "Bearer other-token")
	rec := httptest.NewRecorder()
	s.Handler(http.NotFoundHandler()).ServeHTTP(rec, req)
	want := `Forbidden: user "system:serviceaccount:default:other" cannot get path "/metrics": no RBAC policy matched`
	if got := strings.TrimSpace(rec.Body.String()); got != want {
		t.Errorf("body %q, want %q", got, want)
	}
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		want    Options
		wantErr string
	}{
		{"defaults", nil, Options{PairName: "c", AlwaysAllowPaths: []string{"/healthz", "/readyz", "/livez"}}, ""},
		{"single-dash flags, as the rest of the command line", []string{"-authentication-kubeconfig=/a", "-authorization-kubeconfig", "/b", "-cert-dir=/certs"},
			Options{PairName: "c", AuthenticationKubeconfig: "/a", AuthorizationKubeconfig: "/b", CertDir: "/certs", AlwaysAllowPaths: []string{"/healthz", "/readyz", "/livez"}}, ""},
		{"always-allowed paths replace the default", []string{"--authorization-always-allow-paths=/metrics, /debug/*"},
			Options{PairName: "c", AlwaysAllowPaths: []string{"/metrics", "/debug/*"}}, ""},
		{"no always-allowed paths", []string{"--authorization-always-allow-paths="}, Options{PairName: "c"}, ""},
		{"a certificate needs its key", []string{"--tls-cert-file=/tls.crt"},
			Options{PairName: "c", TLSCertFile: "/tls.crt", AlwaysAllowPaths: []string{"/healthz", "/readyz", "/livez"}}, "go together"},
		{"a * only at the end", []string{"--authorization-always-allow-paths=/a*b"},
			Options{PairName: "c", AlwaysAllowPaths: []string{"/a*b"}}, "only trailing *"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions("c")
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if o.CertDir != tt.want.CertDir || o.TLSCertFile != tt.want.TLSCertFile || o.PairName != tt.want.PairName ||
				o.AuthenticationKubeconfig != tt.want.AuthenticationKubeconfig || o.AuthorizationKubeconfig != tt.want.AuthorizationKubeconfig ||
				!slices.Equal(o.AlwaysAllowPaths, tt.want.AlwaysAllowPaths) {
				t.Errorf("options %+v, want %+v", *o, tt.want)
			}
			err := o.Validate()
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Errorf("Validate() = %v, want an error with %q", err, tt.wantErr)
			}
		})
	}
}
