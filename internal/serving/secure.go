// Secure serving: HTTPS, with callers authenticated by TokenReview and authorized by
// SubjectAccessReview against the API server.

package serving

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

const (
	// The defaults of kube-controller-manager's flags, which this package does not
	// expose: answers are cached briefly, for responsiveness, yet long enough that a
	// scrape every few seconds costs the API server one review per caller and TTL.
	cacheTTL = 10 * time.Second
	// reviewTimeout bounds each TokenReview and SubjectAccessReview.
	reviewTimeout = 10 * time.Second
)

// reviewBackoff is how a failed review is retried within one request (that of
// k8s.io/apiserver's options): 5 tries over about 4 s.
var reviewBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// Secure is secure serving once configured: the TLS configuration, which serves the
// current certificate, and the checks every request goes through.
type Secure struct {
	// TLSConfig serves HTTP/1.1 only. Scrapers do not need HTTP/2, and without it none
	// of HTTP/2's denial-of-service exposure (rapid reset and the like) applies.
	TLSConfig *tls.Config

	alwaysAllow allowedPaths
	reviews     *reviewer
	logger      klog.Logger
}

// New loads the serving certificate, or generates a self-signed one for localhost and
// the IP address of bindAddress, and builds the authenticator and authorizer, which
// ask the API server named by the kubeconfig flags, or by own when those are empty. A
// certificate read from files is reloaded when they change, until ctx ends.
func (o *Options) New(ctx context.Context, bindAddress string, own *rest.Config) (*Secure, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Secure{logger: klog.FromContext(ctx)}
	var err error
	if s.TLSConfig, err = o.tlsConfig(ctx, bindAddress); err != nil {
		return nil, err
	}
	if s.alwaysAllow, err = newAllowedPaths(o.AlwaysAllowPaths); err != nil {
		return nil, err
	}
	authnClient, err := reviewClient(o.AuthenticationKubeconfig, own)
	if err != nil {
		return nil, fmt.Errorf("loading --authentication-kubeconfig: %w", err)
	}
	authzClient, err := reviewClient(o.AuthorizationKubeconfig, own)
	if err != nil {
		return nil, fmt.Errorf("loading --authorization-kubeconfig: %w", err)
	}
	s.reviews = newReviewer(authnClient.AuthenticationV1().TokenReviews(), authzClient.AuthorizationV1().SubjectAccessReviews(), clock.RealClock{})
	return s, nil
}

// reviewClient is a client from kubeconfig, or else from own.
func reviewClient(kubeconfig string, own *rest.Config) (kubernetes.Interface, error) {
	cfg := own
	if kubeconfig != "" {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: kubeconfig}
		var err error
		cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, err
		}
	}
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = reviewTimeout
	// The reviews' limits (allReviews) already bound what reaches the API server; the
	// client's own limit is theirs, so that it never makes a scrape wait.
	cfg.QPS, cfg.Burst = allReviews, 2*allReviews
	return kubernetes.NewForConfig(cfg)
}

// maxPathLen bounds the path of a request reviewed: the longest the controller serves
// is a profile's, under 30 bytes.
const maxPathLen = 256

// Handler serves mux to requests for an always-allowed path, and to others once the
// caller's bearer token is authenticated (else 401) and the caller is authorized for
// the method, as a verb, on the path (else 403), as kube-controller-manager does for
// requests that are not for API resources. There is no anonymous caller: a request
// without a token is refused with 401.
//
// What no review is made for: a path mux does not serve (404), a path longer than
// maxPathLen (414), and a caller beyond the reviews' rate limits (429).
func (s *Secure) Handler(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			http.NotFound(w, r)
			return
		}
		if s.alwaysAllow.allow(r.URL.Path) {
			mux.ServeHTTP(w, r)
			return
		}
		if len(r.URL.Path) > maxPathLen {
			http.Error(w, "URI Too Long", http.StatusRequestURITooLong)
			return
		}
		ctx := r.Context()
		token, ok := bearerToken(r)
		if !ok {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		user, err := s.reviews.authenticate(ctx, remoteHost(r), token)
		if err != nil {
			switch {
			case errors.Is(err, errTooManyReviews):
				tooManyRequests(w)
				return
			case !errors.Is(err, errNotAuthenticated):
				s.logger.Error(err, "Authenticating a request", "path", r.URL.Path, "remoteAddr", r.RemoteAddr)
			default:
				s.logger.V(2).Info("Refused a request: authentication failed", "path", r.URL.Path, "remoteAddr", r.RemoteAddr, "err", err)
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		// The token has done its work; nothing behind this handler needs it.
		r.Header.Del("Authorization")
		verb := strings.ToLower(r.Method)
		allowed, reason, err := s.reviews.authorize(ctx, user, verb, r.URL.Path)
		switch {
		case errors.Is(err, errTooManyReviews):
			tooManyRequests(w)
		case err != nil:
			s.logger.Error(err, "Authorizing a request", "user", user.Username, "verb", verb, "path", r.URL.Path)
			http.Error(w, "Internal Server Error: authorization failed", http.StatusInternalServerError)
		case allowed:
			mux.ServeHTTP(w, r)
		default:
			msg := fmt.Sprintf("Forbidden: user %q cannot %s path %q", user.Username, verb, r.URL.Path)
			if reason != "" {
				msg += ": " + reason
			}
			http.Error(w, msg, http.StatusForbidden)
		}
	})
}

// tooManyRequests answers a caller beyond the reviews' limits.
func tooManyRequests(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "1")
	http.Error(w, "Too Many Requests: "+errTooManyReviews.Error(), http.StatusTooManyRequests)
}

// remoteHost is the host of the request's remote address: the caller, as far as the
// reviews' limit per caller can tell before its token is reviewed.
func remoteHost(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// hostIP is the IP address of a bind address, or nil when it names none in particular.
func hostIP(bindAddress string) net.IP {
	host, _, err := net.SplitHostPort(bindAddress)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.IsUnspecified() {
		return nil
	}
	return ip
}
