package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	clientset "github.com/seed-e6610ed6/sample-controller/pkg/generated/clientset/versioned"
	"github.com/seed-e6610ed6/sample-controller/pkg/localcluster"
)

const (
	// benchNamespace holds the Foos and their Deployments.
	benchNamespace = "bench"
	// unrelatedNamespace holds the Deployments of the memory case, which no Foo owns.
	unrelatedNamespace = "unrelated"

	crdName = "foos.samplecontroller.k8s.io"
	// initialReplicas is the spec.replicas of every Foo the bench creates.
	initialReplicas = 1
)

// group is one fresh cluster with the CRD installed, the bench's clients, and the
// watches that observe it.
type group struct {
	env     *benchEnv
	name    string
	cluster *localcluster.Cluster
	kube    kubernetes.Interface
	sample  clientset.Interface
	watch   *watcher

	// replicas is the last spec.replicas the reaction case set on each Foo.
	replicas []int32
}

// startGroup starts a controller-less cluster (etcd and kube-apiserver only), installs
// the CRD, creates the bench namespace and starts watching it. Its state and logs stay
// in <out>/clusters/<name> until the next run.
func startGroup(ctx context.Context, env *benchEnv, name string) (*group, error) {
	progressf("%s: starting a fresh cluster", name)
	opts := localcluster.Options{
		Dir:                   filepath.Join(env.cfg.outDir, "clusters", name),
		SkipControllerManager: true,
		SkipScheduler:         true,
		SkipKwok:              true,
	}
	if env.cfg.profile {
		opts.ExtraArgs = map[string][]string{localcluster.APIServer: {"--profiling=true"}}
	}
	cluster, err := localcluster.Start(ctx, opts)
	if err != nil {
		return nil, err
	}
	g := &group{env: env, name: name, cluster: cluster}
	if err := g.setUp(ctx); err != nil {
		g.stop()
		return nil, err
	}
	return g, nil
}

func (g *group) setUp(ctx context.Context) error {
	// The bench's own requests never wait on a client-side limiter: it must be able to
	// send 1000 patches per second.
	cfg := g.cluster.RESTConfig()
	cfg.QPS = -1
	cfg.UserAgent = "sample-controller-bench"
	var err error
	if g.kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if g.sample, err = clientset.NewForConfig(cfg); err != nil {
		return err
	}

	binDir, err := localcluster.DefaultBinDir()
	if err != nil {
		return err
	}
	kubectl := filepath.Join(binDir, "kubectl")
	crd := filepath.Join(g.env.root, "artifacts", "examples", "crd.yaml")
	for _, args := range [][]string{
		{"apply", "-f", crd},
		{"wait", "--for=condition=Established", "--timeout=60s", "crd/" + crdName},
	} {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", g.cluster.KubeconfigPath()}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl %v: %w\n%s", args, err, out)
		}
	}
	for _, ns := range []string{benchNamespace, unrelatedNamespace} {
		_, err := g.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	// An Established CRD can take a moment more to be served to every client; this
	// wait is before anything is measured.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := g.sample.SamplecontrollerV1alpha1().Foos(benchNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the Foo API to be served: %w", err)
	}
	g.watch, err = startWatcher(ctx, g.kube, g.sample)
	return err
}

// stop stops the watches and the cluster, and removes its etcd data (at least 64 MB
// each); the logs stay.
func (g *group) stop() {
	if g.watch != nil {
		g.watch.stop()
	}
	if err := g.cluster.Stop(); err != nil {
		progressf("%s: stopping the cluster: %v", g.name, err)
	}
	if err := os.RemoveAll(filepath.Join(g.cluster.Dir(), "etcd")); err != nil {
		progressf("%s: %v", g.name, err)
	}
}

// logPath is a file for a log of this group, next to the results.
func (g *group) logPath(what string) string {
	return filepath.Join(g.env.cfg.outDir, fmt.Sprintf("%s-%s.log", g.name, what))
}

// fooName names the i-th Foo of the bench; its Deployment has the same name.
func fooName(i int) string { return fmt.Sprintf("foo-%05d", i) }

// createFoos creates n Foos in parallel and returns them as the apiserver stored them.
func (g *group) createFoos(ctx context.Context, n int) ([]*samplev1alpha1.Foo, error) {
	began := time.Now()
	foos := make([]*samplev1alpha1.Foo, n)
	err := parallel(ctx, n, g.env.cfg.parallelism, func(ctx context.Context, i int) error {
		foo := &samplev1alpha1.Foo{
			ObjectMeta: metav1.ObjectMeta{Name: fooName(i), Namespace: benchNamespace},
			Spec:       samplev1alpha1.FooSpec{DeploymentName: fooName(i), Replicas: ptr.To[int32](initialReplicas)},
		}
		created, err := g.sample.SamplecontrollerV1alpha1().Foos(benchNamespace).Create(ctx, foo, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating Foo %s: %w", foo.Name, err)
		}
		foos[i] = created
		return nil
	})
	if err != nil {
		return nil, err
	}
	progressf("%s: created %d Foos in %v", g.name, n, time.Since(began).Round(time.Millisecond))
	return foos, nil
}

// seedFoos creates n Foos, waits until the watch has seen them all, and reads the
// apiserver's request counters: the start of a cold start, the controller's or the
// limit's.
func (g *group) seedFoos(ctx context.Context, n int) ([]*samplev1alpha1.Foo, requestCounts, error) {
	foos, err := g.createFoos(ctx, n)
	if err != nil {
		return nil, nil, err
	}
	if err := g.watch.waitForFoos(ctx, n); err != nil {
		return nil, nil, err
	}
	before, err := scrapeAPIServer(ctx, g.kube)
	if err != nil {
		return nil, nil, err
	}
	return foos, before, nil
}

// parallel calls fn for 0..n-1 from at most workers goroutines and returns the first
// error, after which no new calls start.
func parallel(parent context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range min(workers, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return parent.Err()
}
