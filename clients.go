// The clients every mode reads and writes with, built from the kubeconfig as kubectl
// builds them, and what wraps them: every request waits while the API server cannot be
// reached (internal/outage), and with a Lease every write but the Leases' passes the
// gate of its tenure (internal/tenure).

package main

import (
	"context"
	"fmt"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/outage"
	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
)

// clients are the controller's clients, all from one configuration.
type clients struct {
	// config is what they were built from, for secure serving's reviews.
	config *rest.Config
	// lease writes the Leases. The elections keep the tenures that every other write
	// is held to at the gate, so it passes no gate itself.
	lease kubernetes.Interface
	// kube and sample write everything else, each write only inside a valid tenure
	// when elected.
	kube   kubernetes.Interface
	sample clientset.Interface
	// metadata reads the Foos' and the Deployments' metadata, for a new leader's
	// check of its caches.
	metadata metadata.Interface
}

// newClients builds the clients from cfg. Every request waits while the API server
// cannot be reached (outage.Waiter), instead of failing into client-go's reflector
// backoff, which grows to a minute and would keep the informers asleep long after the
// server is back. With elected, every write but the Leases' passes the gate of its
// tenure (tenure.Gate), which knows this process by identity in the fencing policy's
// denials. The outage wait is outside the gate: a write that waited for the API
// server is checked against its tenure, and given the server-side timeout of what is
// left of it, when it is sent, not before it waited.
func newClients(ctx context.Context, cfg *rest.Config, elected bool, identity string) (*clients, error) {
	logger := klog.FromContext(ctx)
	var wentDown time.Time
	waiter, err := outage.New(ctx, cfg, outage.DefaultInterval, func(down bool) {
		if down {
			wentDown = time.Now()
			logger.Info("The API server cannot be reached: requests wait until it answers", "server", cfg.Host)
			return
		}
		logger.Info("The API server answers again", "server", cfg.Host, "after", time.Since(wentDown).Round(time.Millisecond))
	})
	if err != nil {
		return nil, err
	}
	gate := &tenure.Gate{
		Required: elected,
		HeldBack: func(reason string) { writesHeldBack.WithLabelValues(reason).Inc() },
		Identity: identity,
	}
	leases, kube, foos := clientConfigs(cfg, gate, waiter)
	c := &clients{config: cfg}
	if c.lease, err = kubernetes.NewForConfig(leases); err != nil {
		return nil, fmt.Errorf("building the Lease client: %w", err)
	}
	if c.kube, err = kubernetes.NewForConfig(kube); err != nil {
		return nil, fmt.Errorf("building the Kubernetes client: %w", err)
	}
	if c.sample, err = clientset.NewForConfig(foos); err != nil {
		return nil, fmt.Errorf("building the Foo client: %w", err)
	}
	if c.metadata, err = metadata.NewForConfig(foos); err != nil {
		return nil, fmt.Errorf("building the metadata client: %w", err)
	}
	return c, nil
}

// clientConfigs derives from cfg the configurations of the Lease client, which waits
// out outages but passes no gate, and of the clients of everything else, built-in
// types and Foos, which pass both.
func clientConfigs(cfg *rest.Config, gate *tenure.Gate, waiter *outage.Waiter) (leases, kube, foos *rest.Config) {
	// Built-in types travel as protobuf, which costs the API server and this process
	// less to encode and decode than JSON. Foos are custom resources: JSON only.
	kube = rest.CopyConfig(cfg)
	kube.ContentType = runtime.ContentTypeProtobuf
	kube.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	leases = rest.CopyConfig(kube)
	leases.Wrap(waiter.Wrap)
	kube.Wrap(gate.Wrap)
	kube.Wrap(waiter.Wrap)
	foos = rest.CopyConfig(cfg)
	foos.Wrap(gate.Wrap)
	foos.Wrap(waiter.Wrap)
	return leases, kube, foos
}

// restConfig loads the client configuration the way kubectl does, applies the
// client-side rate limits, and returns it with the namespace the controller runs in.
func (c clientOptions) restConfig() (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	overrides := &clientcmd.ConfigOverrides{}
	overrides.ClusterInfo.Server = c.master
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", err
	}
	// The context's namespace, or in a Pod its own.
	namespace, _, err := loader.Namespace()
	if err != nil {
		return nil, "", err
	}
	cfg.UserAgent = controllerAgentName
	if c.kubeAPIQPS > 0 {
		cfg.QPS = float32(c.kubeAPIQPS)
		cfg.Burst = c.kubeAPIBurst
		if cfg.Burst <= 0 {
			// At least 1: client-go refuses a limiter with no burst.
			cfg.Burst = max(1, int(math.Ceil(2*c.kubeAPIQPS)))
		}
	} else {
		// A negative QPS makes client-go build no rate limiter at all.
		cfg.QPS = -1
	}
	return cfg, namespace, nil
}
