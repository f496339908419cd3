package serving

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2"
	clocktesting "k8s.io/utils/clock/testing"
)

const scraper = "system:serviceaccount:monitoring:prometheus"

// apiServer answers the reviews as an API server would, and records them.
type apiServer struct {
	// users are the tokens it authenticates.
	users map[string]authenticationv1.UserInfo
	// fail, when set, is the error of the next reviews, one per entry.
	fail []error
	// reviews are the reviews made, as "token TOKEN" and "access USER VERB PATH".
	reviews []string
	// lastAccess is the spec of the last SubjectAccessReview.
	lastAccess authorizationv1.SubjectAccessReviewSpec
}

func newAPIServer() *apiServer {
	return &apiServer{users: map[string]authenticationv1.UserInfo{
		"scraper-token": {Username: scraper, UID: "u1", Groups: []string{"system:serviceaccounts"}, Extra: map[string]authenticationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}}},
		"other-token":   {Username: "system:serviceaccount:default:other"},
	}}
}

// secure is a Secure whose reviews a's fake clientset answers, with clk as its clock.
func (a *apiServer) secure(t *testing.T, clk *clocktesting.FakeClock, alwaysAllow ...string) *Secure {
	t.Helper()
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		review := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		a.reviews = append(a.reviews, "token "+review.Spec.Token)
		if err := a.failure(); err != nil {
			return true, nil, err
		}
		user, ok := a.users[review.Spec.Token]
		out := review.DeepCopy()
		out.Status = authenticationv1.TokenReviewStatus{Authenticated: ok, User: user}
		if review.Spec.Token == "undecided" {
			out.Status.Error = "the authentication webhook failed"
		}
		return true, out, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		review := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		attrs := review.Spec.NonResourceAttributes
		a.reviews = append(a.reviews, fmt.Sprintf("access %s %s %s", review.Spec.User, attrs.Verb, attrs.Path))
		a.lastAccess = review.Spec
		if err := a.failure(); err != nil {
			return true, nil, err
		}
		out := review.DeepCopy()
		switch {
		case attrs.Path == "/contradiction":
			out.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true, Denied: true}
		case review.Spec.User == scraper && attrs.Verb == "get" && attrs.Path == "/metrics":
			out.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: true}
		default:
			out.Status = authorizationv1.SubjectAccessReviewStatus{Reason: "no RBAC policy matched"}
		}
		return true, out, nil
	})
	paths, err := newAllowedPaths(alwaysAllow)
	if err != nil {
		t.Fatal(err)
	}
	return &Secure{
		alwaysAllow: paths,
		reviews:     newReviewer(client.AuthenticationV1().TokenReviews(), client.AuthorizationV1().SubjectAccessReviews(), clk),
		logger:      klog.Background(),
	}
}

func (a *apiServer) failure() error {
	if len(a.fail) == 0 {
		return nil
	}
	err := a.fail[0]
	a.fail = a.fail[1:]
	return err
}

// servedPaths are the patterns the handler behind s serves in these tests.
var servedPaths = []string{"/metrics", "/debug/pprof/", "/contradiction", "/healthz", "/healthz/", "/public/"}

// serve sends a request through s's handler, from a caller at 192.0.2.1; it returns
// the status, the body, and the request the handler behind got, if it ran.
func serve(t *testing.T, s *Secure, method, path, authorization string) (int, string, *http.Request) {
	t.Helper()
	return serveFrom(t, s, "192.0.2.1:4321", method, path, authorization)
}

// serveFrom is serve from the caller at remoteAddr.
func serveFrom(t *testing.T, s *Secure, remoteAddr, method, path, authorization string) (int, string, *http.Request) {
	t.Helper()
	var served *http.Request
	mux := http.NewServeMux()
	for _, p := range servedPaths {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { served = r })
	}
	handler := s.Handler(mux)
	req := httptest.NewRequestWithContext(t.Context(), method, path, nil)
	req.RemoteAddr = remoteAddr
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, req)
	if (served != nil) != (rec.Code == http.StatusOK) {
		t.Errorf("%s %s: status %d, and the handler behind ran: %v", method, path, rec.Code, served != nil)
	}
	return rec.Code, strings.TrimSpace(rec.Body.String()), served
}

func TestHandler(t *testing.T) {
	internal := apierrors.NewInternalError(fmt.Errorf("etcd is down"))
	refused := apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", fmt.Errorf("RBAC"))
	tests := []struct {
		name          string
		method        string
		path          string
		authorization string
		fail          []error
		want          int
		wantReviews   []string
	}{
		{"no token", http.MethodGet, "/metrics", "", nil, http.StatusUnauthorized, nil},
		{"not a bearer token", http.MethodGet, "/metrics", "Basic c2NyYXBlcg==", nil, http.StatusUnauthorized, nil},
		{"an empty bearer token", http.MethodGet, "/metrics", "Bearer  scraper-token", nil, http.StatusUnauthorized, nil},
		{"a token the API server does not know", http.MethodGet, "/metrics", "Bearer stolen", nil, http.StatusUnauthorized, []string{"token stolen"}},
		{"the token review is refused to the controller, and not retried", http.MethodGet, "/metrics", "Bearer scraper-token", []error{refused}, http.StatusUnauthorized,
			[]string{"token scraper-token"}},
		{"a token review failing inside the API server is retried", http.MethodGet, "/metrics", "Bearer scraper-token", []error{internal}, http.StatusOK,
			[]string{"token scraper-token", "token scraper-token", "access " + scraper + " get /metrics"}},
		{"a caller without the role", http.MethodGet, "/metrics", "Bearer other-token", nil, http.StatusForbidden,
			[]string{"token other-token", "access system:serviceaccount:default:other get /metrics"}},
		{"a caller with the role", http.MethodGet, "/metrics", "Bearer scraper-token", nil, http.StatusOK,
			[]string{"token scraper-token", "access " + scraper + " get /metrics"}},
		{"the scheme in any case", http.MethodGet, "/metrics", "bearer scraper-token", nil, http.StatusOK,
			[]string{"token scraper-token", "access " + scraper + " get /metrics"}},
		{"the role is for one path", http.MethodGet, "/debug/pprof/heap", "Bearer scraper-token", nil, http.StatusForbidden,
			[]string{"token scraper-token", "access " + scraper + " get /debug/pprof/heap"}},
		{"the role is for one verb", http.MethodPost, "/metrics", "Bearer scraper-token", nil, http.StatusForbidden,
			[]string{"token scraper-token", "access " + scraper + " post /metrics"}},
		{"the access review fails", http.MethodGet, "/metrics", "Bearer scraper-token", []error{nil, refused}, http.StatusInternalServerError,
			[]string{"token scraper-token", "access " + scraper + " get /metrics"}},
		{"an access review failing inside the API server is retried", http.MethodGet, "/metrics", "Bearer scraper-token", []error{nil, internal}, http.StatusOK,
			[]string{"token scraper-token", "access " + scraper + " get /metrics", "access " + scraper + " get /metrics"}},
		{"an access both allowed and denied", http.MethodGet, "/contradiction", "Bearer scraper-token", nil, http.StatusInternalServerError,
			[]string{"token scraper-token", "access " + scraper + " get /contradiction"}},
		{"an always-allowed path needs no token", http.MethodGet, "/healthz", "", nil, http.StatusOK, nil},
		{"an always-allowed prefix", http.MethodGet, "/public/anything", "", nil, http.StatusOK, nil},
		{"an always-allowed path is exact", http.MethodGet, "/healthz/more", "", nil, http.StatusUnauthorized, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAPIServer()
			a.fail = tt.fail
			s := a.secure(t, clocktesting.NewFakeClock(time.Now()), "/healthz", "/public/*")
			code, body, _ := serve(t, s, tt.method, tt.path, tt.authorization)
			if code != tt.want {
				t.Errorf("%s %s: status %d, want %d (body %q)", tt.method, tt.path, code, tt.want, body)
			}
			if !slices.Equal(a.reviews, tt.wantReviews) {
				t.Errorf("reviews %q, want %q", a.reviews, tt.wantReviews)
			}
		})
	}
}

// The caller's whole identity goes into the access review, and its token no further
// than the review of it.
func TestHandlerPassesTheCallerOn(t *testing.T) {
	a := newAPIServer()
	s := a.secure(t, clocktesting.NewFakeClock(time.Now()))
	code, _, served := serve(t, s, http.MethodGet, "/metrics", "Bearer scraper-token")
	if code != http.StatusOK {
		t.Fatalf("status %d, want 200", code)
	}
	want := authorizationv1.SubjectAccessReviewSpec{
		User: scraper, UID: "u1", Groups: []string{"system:serviceaccounts", "system:authenticated"},
		Extra:                 map[string]authorizationv1.ExtraValue{"authentication.kubernetes.io/pod-name": {"prometheus-0"}},
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: "/metrics", Verb: "get"},
	}
	if got := a.lastAccess; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("access review %+v, want %+v", got, want)
	}
	if h := served.Header.Get("Authorization"); h != "" {
		t.Errorf("the handler behind got the Authorization header %q", h)
	}
}

// Answers are remembered for cacheTTL, a refusal as well as a user; a review that
// failed is not remembered.
func TestHandlerRemembersAnswers(t *testing.T) {
	a := newAPIServer()
	clk := clocktesting.NewFakeClock(time.Now())
	s := a.secure(t, clk)
	steps := []struct {
		name          string
		authorization string
		after         time.Duration
		want          int
		wantReviews   []string
	}{
		{"first scrape", "Bearer scraper-token", 0, http.StatusOK, []string{"token scraper-token", "access " + scraper + " get /metrics"}},
		{"again, within the TTL", "Bearer scraper-token", cacheTTL - time.Second, http.StatusOK, nil},
		{"after the TTL", "Bearer scraper-token", 2 * time.Second, http.StatusOK, []string{"token scraper-token", "access " + scraper + " get /metrics"}},
		{"a refused token", "Bearer stolen", 0, http.StatusUnauthorized, []string{"token stolen"}},
		{"the refused token again", "Bearer stolen", 0, http.StatusUnauthorized, nil},
		{"a refused caller", "Bearer other-token", 0, http.StatusForbidden, []string{"token other-token", "access system:serviceaccount:default:other get /metrics"}},
		{"the refused caller again", "Bearer other-token", 0, http.StatusForbidden, nil},
		{"a token the API server cannot decide on", "Bearer undecided", 0, http.StatusUnauthorized, []string{"token undecided"}},
		{"that token again: not remembered", "Bearer undecided", 0, http.StatusUnauthorized, []string{"token undecided"}},
		{"a remembered caller on another path", "Bearer scraper-token", 0, http.StatusForbidden, []string{"access " + scraper + " get /debug/pprof/heap"}},
		{"a remembered caller with another verb", "Bearer scraper-token", 0, http.StatusForbidden, []string{"access " + scraper + " post /metrics"}},
		{"the refusals expire", "Bearer stolen", cacheTTL + time.Second, http.StatusUnauthorized, []string{"token stolen"}},
	}
	requests := map[string][2]string{
		"a remembered caller on another path":   {http.MethodGet, "/debug/pprof/heap"},
		"a remembered caller with another verb": {http.MethodPost, "/metrics"},
	}
	for _, step := range steps {
		clk.Step(step.after)
		a.reviews = nil
		method, path := http.MethodGet, "/metrics"
		if r, ok := requests[step.name]; ok {
			method, path = r[0], r[1]
		}
		if code, body, _ := serve(t, s, method, path, step.authorization); code != step.want {
			t.Errorf("%s: status %d, want %d (body %q)", step.name, code, step.want, body)
		}
		if !slices.Equal(a.reviews, step.wantReviews) {
			t.Errorf("%s: reviews %q, want %q", step.name, a.reviews, step.wantReviews)
		}
	}

	refused := apierrors.NewForbidden(schema.GroupResource{Group: "authentication.k8s.io", Resource: "tokenreviews"}, "", fmt.Errorf("RBAC"))
	a.reviews, a.fail = nil, []error{refused}
	clk.Step(cacheTTL + time.Second)
	if code, _, _ := serve(t, s, http.MethodGet, "/metrics", "Bearer scraper-token"); code != http.StatusUnauthorized {
		t.Errorf("with the token review refused: status %d, want 401", code)
	}
	if code, _, _ := serve(t, s, http.MethodGet, "/metrics", "Bearer scraper-token"); code != http.StatusOK {
		t.Errorf("with the token review back: status %d, want 200", code)
	}
	if want := []string{"token scraper-token", "token scraper-token", "access " + scraper + " get /metrics"}; !slices.Equal(a.reviews, want) {
		t.Errorf("after a failed review: reviews %q, want %q", a.reviews, want)
	}
}

// A review that keeps failing is given up after its tries, or when the request's
// context ends, whichever comes first.
func TestReviewsGiveUp(t *testing.T) {
	internal := apierrors.NewInternalError(fmt.Errorf("etcd is down"))
	a := newAPIServer()
	a.fail = slices.Repeat([]error{internal}, 10)
	s := a.secure(t, clocktesting.NewFakeClock(time.Now()))
	if code, _, _ := serve(t, s, http.MethodGet, "/metrics", "Bearer scraper-token"); code != http.StatusUnauthorized {
		t.Errorf("with every token review failing: status %d, want 401", code)
	}
	if len(a.reviews) != reviewBackoff.Steps {
		t.Errorf("%d token reviews, want %d tries", len(a.reviews), reviewBackoff.Steps)
	}

	a.reviews = nil
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	began := time.Now()
	if _, err := s.reviews.authenticate(ctx, "192.0.2.1", "scraper-token"); err == nil {
		t.Error("authenticate succeeded with every token review failing")
	}
	if took := time.Since(began); took > 2*time.Second || len(a.reviews) > 2 {
		t.Errorf("with the context ending after 100ms: gave up after %v and %d reviews", took, len(a.reviews))
	}
}

// No review is made for a path nothing serves, or one longer than any served.
func TestHandlerReviewsOnlyServedPaths(t *testing.T) {
	long := "/debug/pprof/" + strings.Repeat("x", maxPathLen)
	huge := "/" + strings.Repeat("x", 1<<20)
	tests := []struct {
		name, path, authorization string
		want                      int
	}{
		{"a path nothing serves", "/not-served", "Bearer stolen", http.StatusNotFound},
		{"a path nothing serves, for a caller with the role", "/not-served", "Bearer scraper-token", http.StatusNotFound},
		{"a path nothing serves, without a token", "/not-served", "", http.StatusNotFound},
		{"1 MiB of path nothing serves", huge, "Bearer stolen", http.StatusNotFound},
		{"a served prefix, with a path longer than any served", long, "Bearer scraper-token", http.StatusRequestURITooLong},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := newAPIServer()
			s := a.secure(t, clocktesting.NewFakeClock(time.Now()))
			if code, body, _ := serve(t, s, http.MethodGet, tt.path, tt.authorization); code != tt.want {
				t.Errorf("status %d, want %d (body %q)", code, tt.want, body)
			}
			if len(a.reviews) != 0 {
				t.Errorf("reviews %q, want none", a.reviews)
			}
		})
	}
}

// Reviews are limited in rate, for each caller and for all of them: beyond, a caller
// is answered 429 and no review is made; answers remembered are served whatever the
// limits.
func TestReviewsAreLimited(t *testing.T) {
	a := newAPIServer()
	clk := clocktesting.NewFakeClock(time.Now())
	s := a.secure(t, clk)
	send := func(remoteAddr, path, token string) int {
		code, _, _ := serveFrom(t, s, remoteAddr, http.MethodGet, path, "Bearer "+token)
		return code
	}
	// Remembered before any limit is reached.
	if code := send("192.0.2.9:1", "/metrics", "scraper-token"); code != http.StatusOK {
		t.Fatalf("the scraper's first scrape: status %d, want 200", code)
	}

	a.reviews = nil
	for i := range perCallerBurst + 3 {
		want := http.StatusUnauthorized
		if i >= perCallerBurst {
			want = http.StatusTooManyRequests
		}
		if code := send("192.0.2.1:1", "/metrics", fmt.Sprintf("random-%d", i)); code != want {
			t.Errorf("random token %d from one caller: status %d, want %d", i, code, want)
		}
	}
	if len(a.reviews) != perCallerBurst {
		t.Errorf("%d token reviews for one caller's random tokens, want its burst of %d", len(a.reviews), perCallerBurst)
	}
	if code := send("192.0.2.9:1", "/metrics", "scraper-token"); code != http.StatusOK {
		t.Errorf("the scraper, remembered, while another caller is limited: status %d, want 200", code)
	}
	clk.Step(time.Second / perCaller)
	if code := send("192.0.2.1:2", "/metrics", "random-again"); code != http.StatusUnauthorized {
		t.Errorf("a random token a second later: status %d, want 401 after a review", code)
	}

	// Many callers: all of them together get the total's burst (refilled by now,
	// within the scraper's cacheTTL).
	a.reviews = nil
	clk.Step(2 * time.Second)
	limited := 0
	for i := range 4 * allReviews {
		if send(fmt.Sprintf("198.51.100.%d:1", i), "/metrics", fmt.Sprintf("spread-%d", i)) == http.StatusTooManyRequests {
			limited++
		}
	}
	if len(a.reviews) != 2*allReviews || limited != 2*allReviews {
		t.Errorf("%d callers' random tokens: %d reviews and %d answered 429, want %d and %d", 4*allReviews, len(a.reviews), limited, 2*allReviews, 2*allReviews)
	}
	if code := send("192.0.2.9:1", "/metrics", "scraper-token"); code != http.StatusOK {
		t.Errorf("the scraper, remembered, with every caller limited: status %d, want 200", code)
	}

	// One user on ever new paths: its access reviews are limited as its tokens are.
	a.reviews = nil
	clk.Step(2 * time.Second)
	for i := range perCallerBurst + 2 {
		want := http.StatusForbidden
		if i >= perCallerBurst {
			want = http.StatusTooManyRequests
		}
		if code := send(fmt.Sprintf("203.0.113.%d:1", i), fmt.Sprintf("/debug/pprof/p%d", i), "other-token"); code != want {
			t.Errorf("path %d of one user: status %d, want %d", i, code, want)
		}
	}
	var access int
	for _, r := range a.reviews {
		if strings.HasPrefix(r, "access ") {
			access++
		}
	}
	if access != perCallerBurst {
		t.Errorf("%d access reviews for one user's paths, want its burst of %d (reviews %q)", access, perCallerBurst, a.reviews)
	}
}

// The always-allowed paths match as k8s.io/apiserver's path authorizer does, under
// the same flag.
func TestAllowedPathsAsTheAPIServer(t *testing.T) {
	configs := [][]string{
		{"/healthz", "/readyz", "/livez"},
		{"healthz"},
		{"/"},
		{"*"},
		{"/public*"},
		{"/public/*", "/metrics"},
		{},
	}
	paths := []string{"/", "", "/healthz", "healthz", "/healthz/", "/healthzx", "/public", "/publicX", "/public/a", "/metrics", "/metrics/x", "/debug/pprof/heap"}
	for _, config := range configs {
		ours, err := newAllowedPaths(config)
		if err != nil {
			t.Fatalf("%q: %v", config, err)
		}
		theirs, err := path.NewAuthorizer(config)
		if err != nil {
			t.Fatalf("%q: the path authorizer: %v", config, err)
		}
		for _, p := range paths {
			decision, _, _ := theirs.Authorize(t.Context(), authorizer.AttributesRecord{Verb: "get", Path: p})
			if want := decision == authorizer.DecisionAllow; ours.allow(p) != want {
				t.Errorf("paths %q: %q allowed %v, the API server's %v", config, p, ours.allow(p), want)
			}
		}
	}
}

func TestForbiddenSaysWhoAndWhat(t *testing.T) {
	s := newAPIServer().secure(t, clocktesting.NewFakeClock(time.Now()))
	_, body, _ := serve(t, s, http.MethodGet, "/metrics", "Bearer other-token")
	want := `Forbidden: user "system:serviceaccount:default:other" cannot get path "/metrics": no RBAC policy matched`
	if body != want {
		t.Errorf("body %q, want %q", body, want)
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
