// `sample-controller check`: what the chart's test (helm test) runs, in the
// controller's own image, which has no shell or HTTP client. It is a client of the
// controller as Prometheus is, and shares nothing with the controller but the clients'
// configuration.

package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

const (
	// checkCommand is the argument that runs the check instead of the controller.
	checkCommand = "check"
	// checkMetric is a series every replica serves from its start.
	checkMetric = "sample_controller_build_info"
	// serviceAccountToken is where a Pod's ServiceAccount token is mounted.
	serviceAccountToken = "/var/run/secrets/kubernetes.io/serviceaccount/token"
)

// checkOptions are the check's flags.
type checkOptions struct {
	clients    clientOptions
	service    string
	serverName string
	caFile     string
	tokenFile  string
	timeout    time.Duration
}

// runCheck parses the check's flags and checks until it passes or its timeout ends:
// the metrics Service in the Pod's namespace has at least one Ready endpoint, and
// every Ready endpoint refuses a scrape without a token and answers one with the
// ServiceAccount's token with the controller's metrics. It asks the Pods by address,
// as Prometheus does, so it needs neither cluster DNS nor the Service's virtual IP.
func runCheck(ctx context.Context, args []string, out io.Writer) error {
	var o checkOptions
	fs := flag.NewFlagSet(checkCommand, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&o.clients.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty in a Pod.")
	fs.StringVar(&o.service, "service", "sample-controller-metrics", "The metrics Service, in the namespace of the kubeconfig's context or the Pod.")
	fs.StringVar(&o.serverName, "tls-server-name", "", "The name the metrics certificate must carry, with --ca-file. Empty means SERVICE.NAMESPACE.svc.")
	fs.StringVar(&o.caFile, "ca-file", "", "CA bundle to verify the metrics certificate with. Empty skips verification, as the ServiceMonitor does without cert-manager.")
	fs.StringVar(&o.tokenFile, "token-file", serviceAccountToken, "Bearer token to scrape with: the token of a ServiceAccount bound to sample-controller-metrics-reader.")
	fs.DurationVar(&o.timeout, "timeout", time.Minute, "How long to retry before failing.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, namespace, err := o.clients.restConfig()
	if err != nil {
		return fmt.Errorf("loading the client configuration: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	token, err := os.ReadFile(o.tokenFile)
	if err != nil {
		return err
	}
	tlsConfig := &tls.Config{InsecureSkipVerify: o.caFile == "", ServerName: o.serverName} //nolint:gosec // as the ServiceMonitor without cert-manager
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return err
		}
		tlsConfig.RootCAs = x509.NewCertPool()
		if !tlsConfig.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s holds no PEM certificate", o.caFile)
		}
		if tlsConfig.ServerName == "" {
			tlsConfig.ServerName = o.service + "." + namespace + ".svc"
		}
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}

	return retryUntil(ctx, o.timeout, 2*time.Second, func(ctx context.Context) error {
		addresses, err := readyEndpoints(ctx, kube, namespace, o.service)
		if err == nil {
			err = scrapeAll(ctx, client, addresses, strings.TrimSpace(string(token)))
		}
		if err == nil {
			fmt.Fprintf(out, "%d Ready replicas of %s/%s answer an authenticated scrape with %s, and refuse one without a token: %s\n",
				len(addresses), namespace, o.service, checkMetric, strings.Join(addresses, ", "))
		}
		return err
	})
}

// retryUntil calls try every interval until it succeeds, fails with an error that is
// not retryable, or timeout ends. Timed out, it returns what the last complete try
// found, which says more than that time ran out.
func retryUntil(ctx context.Context, timeout, interval time.Duration, try func(context.Context) error) error {
	var last error
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, interval, true, func(ctx context.Context) (bool, error) {
		err := try(ctx)
		switch {
		case err == nil:
			return true, nil
		case ctx.Err() != nil:
			// The timeout cut this try short.
			return false, ctx.Err()
		case !retryable(err):
			return false, err
		}
		last = err
		return false, nil
	})
	if err != nil && ctx.Err() != nil && last != nil {
		return fmt.Errorf("after %v: %w", timeout, last)
	}
	return err
}

// retryError is what may pass on a later try: no Ready replica yet, or one not
// answering yet.
type retryError struct{ err error }

func (e retryError) Error() string { return e.err.Error() }
func (e retryError) Unwrap() error { return e.err }

func retryLater(format string, args ...any) error { return retryError{fmt.Errorf(format, args...)} }

func retryable(err error) bool {
	var r retryError
	return errors.As(err, &r)
}

// readyEndpoints returns the address and port of each Ready endpoint of the Service,
// on its port named metrics.
func readyEndpoints(ctx context.Context, kube kubernetes.Interface, namespace, service string) ([]string, error) {
	list, err := kube.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
	switch {
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		return nil, fmt.Errorf("listing the endpoints of the Service %s/%s: %w", namespace, service, err)
	case err != nil:
		return nil, retryLater("listing the endpoints of the Service %s/%s: %w", namespace, service, err)
	}
	var addresses []string
	for _, s := range list.Items {
		i := slices.IndexFunc(s.Ports, func(p discoveryv1.EndpointPort) bool { return p.Name != nil && *p.Name == "metrics" && p.Port != nil })
		if i < 0 {
			continue
		}
		for _, e := range s.Endpoints {
			// An unknown readiness (nil) counts as Ready, as the API says to read it.
			if (e.Conditions.Ready == nil || *e.Conditions.Ready) && len(e.Addresses) > 0 {
				addresses = append(addresses, net.JoinHostPort(e.Addresses[0], strconv.Itoa(int(*s.Ports[i].Port))))
			}
		}
	}
	if len(addresses) == 0 {
		return nil, retryLater("the Service %s/%s has no Ready endpoint: no replica of the controller is Ready", namespace, service)
	}
	slices.Sort(addresses)
	return slices.Compact(addresses), nil
}

// scrapeAll scrapes /metrics at each address, as Prometheus would, without a token
// and then with it.
func scrapeAll(ctx context.Context, client *http.Client, addresses []string, token string) error {
	for _, address := range addresses {
		url := "https://" + address + "/metrics"
		status, _, err := scrape(ctx, client, url, "")
		if err != nil {
			return retryLater("%s: %w", url, err)
		}
		if status != http.StatusUnauthorized {
			return fmt.Errorf("%s answered a scrape without a token with %d, want %d: the metrics are open to anyone", url, status, http.StatusUnauthorized)
		}
		status, body, err := scrape(ctx, client, url, token)
		switch {
		case err != nil:
			return retryLater("%s: %w", url, err)
		case status == http.StatusForbidden:
			return fmt.Errorf("%s refused a scrape with the ServiceAccount's token (%d): is it bound to sample-controller-metrics-reader?", url, status)
		case status != http.StatusOK:
			// 401 when the token review could not be made, 429 when the reviews'
			// budget is spent (Prometheus shares it), 5xx when a review failed.
			return retryLater("%s answered a scrape with the ServiceAccount's token with %d: %s", url, status, strings.TrimSpace(body))
		}
		if !strings.Contains(body, "\n"+checkMetric+"{") {
			return fmt.Errorf("%s answered without %s: it is not the controller", url, checkMetric)
		}
	}
	return nil
}

func scrape(ctx context.Context, client *http.Client, url, token string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, string(body), err
}
