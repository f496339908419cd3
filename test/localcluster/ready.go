// Readiness: waiting on a process until a check passes, and the checks of the
// components' health endpoints.

package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

const pollInterval = 100 * time.Millisecond

// WaitFor polls check until it succeeds, ctx ends, or the process exits: for a
// process to become ready. what names what is awaited in the error; the last error of
// check is part of a timeout error, because it usually says what is missing.
func (p *Process) WaitFor(ctx context.Context, what string, check func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, pollInterval, true, func(ctx context.Context) (bool, error) {
		if p.hasExited() {
			return false, p.ExitError()
		}
		last = check(ctx)
		return last == nil, nil
	})
	switch {
	case err == nil:
		return nil
	case p.hasExited():
		return fmt.Errorf("waiting for %s: %w", what, p.ExitError())
	case last != nil:
		return fmt.Errorf("waiting for %s: %w (last check: %w); see %s", what, err, last, p.LogPath())
	default:
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
}

// prober checks health endpoints. Every component serves with a certificate from the
// cluster's CA, so the checks verify it like any client would.
type prober struct {
	tlsClient *http.Client
	client    *http.Client
}

func newProber(ca *authority) (*prober, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca.certPEM) {
		return nil, errors.New("adding the cluster CA to a pool")
	}
	return &prober{
		tlsClient: &http.Client{
			Timeout:   2 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		},
		client: &http.Client{Timeout: 2 * time.Second},
	}, nil
}

// http checks a plain HTTP endpoint on loopback.
func (pr *prober) http(url string) func(context.Context) error {
	return func(ctx context.Context) error { return get(ctx, pr.client, url) }
}

// https checks /healthz of a component serving on a loopback port; such paths are open
// to anonymous clients.
func (pr *prober) https(port int) func(context.Context) error {
	url := "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) + "/healthz"
	return func(ctx context.Context) error { return get(ctx, pr.tlsClient, url) }
}

// apiserver checks /readyz as the admin, which passes only once the built-in RBAC
// policy and the other post-start hooks are done.
func (pr *prober) apiserver(cfg *rest.Config) func(context.Context) error {
	client, err := rest.HTTPClientFor(cfg)
	return func(ctx context.Context) error {
		if err != nil {
			return fmt.Errorf("creating admin HTTP client: %w", err)
		}
		return get(ctx, client, cfg.Host+"/readyz")
	}
}

func get(ctx context.Context, client *http.Client, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	return nil
}
