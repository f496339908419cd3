// Delegated authentication and authorization: the API server says who a bearer token
// belongs to (TokenReview) and what that caller may do (SubjectAccessReview), as it
// does for kube-controller-manager's secure port. Written here on the typed clients
// rather than taken from k8s.io/apiserver's delegating factories, which bring its
// webhook, tracing and CEL stacks into the binary: 35 MB of it, and 16 MiB of RSS in a
// controller that serves one scraper.

package serving

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationclient "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/utils/clock"
)

// cacheSize bounds each cache of answers in entries. Keys are SHA-256 sums and answers
// are what the API server wrote, so that callers sending ever new tokens or paths cost
// the controller at most a few MiB.
const cacheSize = 4096

// The reviews made for callers (answers already cached cost none) are limited in rate:
// each caller to perCaller a second after a burst of perCallerBurst, all callers
// together to allReviews a second after a burst of twice that. A caller beyond either
// is answered 429. A scraper reviews once per token and path and cacheTTL, so a few
// Prometheus replicas stay far below; a caller sending random tokens gets a review a
// second, and never more than allReviews reach the API server, in the same
// priority-and-fairness flow as the controller's own Lease and object writes.
const (
	perCaller      = 1
	perCallerBurst = 5
	allReviews     = 10
)

// reviewer reviews tokens and access against the API server, and remembers each
// answer for cacheTTL: a token's user or its refusal, and an access decision. A review
// that fails is retried while it may be transient, and never remembered.
type reviewer struct {
	tokens authenticationclient.TokenReviewInterface
	access authorizationclient.SubjectAccessReviewInterface
	ttl    time.Duration
	// tokenAnswers is keyed by the SHA-256 of a token, so that tokens are not kept;
	// accessAnswers by the SHA-256 of the review's spec as JSON.
	tokenAnswers  *cache.LRUExpireCache
	accessAnswers *cache.LRUExpireCache
	limits        *limits
}

// newReviewer reviews with the clients given, its answers expiring and its limits
// refilling by clk.
func newReviewer(tokens authenticationclient.TokenReviewInterface, access authorizationclient.SubjectAccessReviewInterface, clk clock.PassiveClock) *reviewer {
	return &reviewer{
		tokens:        tokens,
		access:        access,
		ttl:           cacheTTL,
		tokenAnswers:  cache.NewLRUExpireCacheWithClock(cacheSize, clk),
		accessAnswers: cache.NewLRUExpireCacheWithClock(cacheSize, clk),
		limits:        newLimits(clk),
	}
}

// errTooManyReviews is the answer for a caller beyond its limit, or beyond all
// callers' limit.
var errTooManyReviews = errors.New("too many reviews: try again later")

// limits are the rate limits of the reviews: one for every caller, and one for each.
type limits struct {
	clk clock.PassiveClock
	all *rate.Limiter
	// each holds a caller's limiter for as long as it could still be below its burst
	// (perCallerBurst seconds after its last review), the most recent cacheSize of
	// them: a caller forgotten earlier is at worst given its burst again.
	each *cache.LRUExpireCache
}

func newLimits(clk clock.PassiveClock) *limits {
	return &limits{
		clk:  clk,
		all:  rate.NewLimiter(allReviews, 2*allReviews),
		each: cache.NewLRUExpireCacheWithClock(cacheSize, clk),
	}
}

// allow takes one review from caller's limit and from all callers', and tells whether
// both had one to give.
func (l *limits) allow(caller string) bool {
	now := l.clk.Now()
	var own *rate.Limiter
	if v, ok := l.each.Get(caller); ok {
		own = v.(*rate.Limiter)
	} else {
		own = rate.NewLimiter(perCaller, perCallerBurst)
	}
	l.each.Add(caller, own, perCallerBurst*time.Second/perCaller)
	return own.AllowN(now, 1) && l.all.AllowN(now, 1)
}

// again takes a retry of a review from all callers' limit.
func (l *limits) again() bool {
	return l.all.AllowN(l.clk.Now(), 1)
}

// tokenAnswer is what a TokenReview said: the user, or that the token is not one.
type tokenAnswer struct {
	authenticated bool
	user          authenticationv1.UserInfo
}

// errNotAuthenticated is the answer for a token the API server does not accept.
var errNotAuthenticated = errors.New("the API server does not authenticate this bearer token")

// authenticate returns the user the API server says token belongs to, or
// errNotAuthenticated, or errTooManyReviews when the token is not remembered and
// caller (the request's remote host) is beyond its limit, or the error of a review that
// could not be made.
func (r *reviewer) authenticate(ctx context.Context, caller, token string) (authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	if v, ok := r.tokenAnswers.Get(key); ok {
		answer := v.(tokenAnswer)
		if !answer.authenticated {
			return authenticationv1.UserInfo{}, errNotAuthenticated
		}
		return answer.user, nil
	}
	if !r.limits.allow("host " + caller) {
		return authenticationv1.UserInfo{}, errTooManyReviews
	}
	// reviewTimeout bounds the review, its retries included.
	ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
	defer cancel()
	var review *authenticationv1.TokenReview
	err := r.retryTransient(ctx, func(ctx context.Context) (err error) {
		review, err = r.tokens.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("reviewing a bearer token: %w", err)
	}
	status := review.Status
	if !status.Authenticated && status.Error != "" {
		// The API server could not tell (a webhook of its own failed, say): not
		// remembered, as a failed review is not.
		return authenticationv1.UserInfo{}, fmt.Errorf("%w: %s", errNotAuthenticated, status.Error)
	}
	answer := tokenAnswer{authenticated: status.Authenticated, user: withAuthenticatedGroup(status.User)}
	r.tokenAnswers.Add(key, answer, r.ttl)
	if !answer.authenticated {
		return authenticationv1.UserInfo{}, errNotAuthenticated
	}
	return answer.user, nil
}

// Groups k8s.io/apiserver's authenticators give every caller by its kind.
const (
	groupAuthenticated   = "system:authenticated"
	groupUnauthenticated = "system:unauthenticated"
	userAnonymous        = "system:anonymous"
)

// withAuthenticatedGroup adds system:authenticated to an authenticated user's groups,
// as k8s.io/apiserver's authenticators do, so that RBAC bindings to it apply: a
// kube-apiserver's TokenReview includes it, but another reviewer named by
// --authentication-kubeconfig may not.
func withAuthenticatedGroup(u authenticationv1.UserInfo) authenticationv1.UserInfo {
	if u.Username == userAnonymous || slices.Contains(u.Groups, groupAuthenticated) || slices.Contains(u.Groups, groupUnauthenticated) {
		return u
	}
	u.Groups = append(slices.Clip(u.Groups), groupAuthenticated)
	return u
}

// authorize tells whether the API server lets user use verb on the non-resource path,
// with its reason, or errTooManyReviews when the answer is not remembered and user is
// beyond its limit, or the error of a review that could not be made.
func (r *reviewer) authorize(ctx context.Context, user authenticationv1.UserInfo, verb, path string) (bool, string, error) {
	spec := authorizationv1.SubjectAccessReviewSpec{
		User:                  user.Username,
		UID:                   user.UID,
		Groups:                user.Groups,
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}
	if len(user.Extra) > 0 {
		spec.Extra = make(map[string]authorizationv1.ExtraValue, len(user.Extra))
		for k, v := range user.Extra {
			spec.Extra[k] = authorizationv1.ExtraValue(v)
		}
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return false, "", err
	}
	key := sha256.Sum256(specJSON)
	status, cached := authorizationv1.SubjectAccessReviewStatus{}, false
	if v, ok := r.accessAnswers.Get(key); ok {
		status, cached = v.(authorizationv1.SubjectAccessReviewStatus), true
	}
	if !cached {
		if !r.limits.allow("user " + user.Username) {
			return false, "", errTooManyReviews
		}
		// reviewTimeout bounds the review, its retries included.
		ctx, cancel := context.WithTimeout(ctx, reviewTimeout)
		defer cancel()
		var review *authorizationv1.SubjectAccessReview
		err := r.retryTransient(ctx, func(ctx context.Context) (err error) {
			review, err = r.access.Create(ctx, &authorizationv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			return err
		})
		if err != nil {
			return false, "", fmt.Errorf("reviewing access: %w", err)
		}
		status = review.Status
		r.accessAnswers.Add(key, status, r.ttl)
	}
	if status.Allowed && status.Denied {
		return false, status.Reason, errors.New("the SubjectAccessReview both allowed and denied the request")
	}
	return status.Allowed, status.Reason, nil
}

// retryTransient makes call, again after reviewBackoff while it fails in a way that may
// pass (a lost connection, the API server overloaded or failing inside) and all
// callers' limit has a review to give, until ctx ends, and returns call's last error.
func (r *reviewer) retryTransient(ctx context.Context, call func(context.Context) error) error {
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, reviewBackoff, func(ctx context.Context) (bool, error) {
		if last != nil && !r.limits.again() {
			return false, last
		}
		last = call(ctx)
		switch {
		case last == nil:
			return true, nil
		case transient(last):
			return false, nil
		default:
			return false, last
		}
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// transient tells whether a review's error may pass on its own.
func transient(err error) bool {
	if utilnet.IsConnectionReset(err) || utilnet.IsHTTP2ConnectionLost(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsTooManyRequests(err) || apierrors.IsServiceUnavailable(err) {
		return true
	}
	_, retryAfter := apierrors.SuggestsClientDelay(err)
	return retryAfter
}

// bearerToken is the token of the request's "Authorization: Bearer" header, if any.
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, found := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !found || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	token, _, _ = strings.Cut(token, " ")
	return token, token != ""
}

// allowedPaths are the paths served without authentication: exact ones, and prefixes
// given with a trailing *. A leading / is optional, as k8s.io/apiserver reads them.
type allowedPaths struct {
	exact    map[string]bool
	prefixes []string
}

func newAllowedPaths(paths []string) (allowedPaths, error) {
	a := allowedPaths{exact: map[string]bool{}}
	for _, p := range paths {
		p = strings.TrimPrefix(p, "/")
		prefix, isPrefix := strings.CutSuffix(p, "*")
		if strings.Contains(prefix, "*") {
			return allowedPaths{}, fmt.Errorf("--authorization-always-allow-paths: only trailing * allowed in %q", p)
		}
		if isPrefix {
			a.prefixes = append(a.prefixes, prefix)
		} else {
			a.exact[p] = true
		}
	}
	return a, nil
}

func (a allowedPaths) allow(path string) bool {
	path = strings.TrimPrefix(path, "/")
	if a.exact[path] {
		return true
	}
	for _, prefix := range a.prefixes {
		if strings.HasPrefix(path, prefix) {
			return true
		}
	}
	return false
}
