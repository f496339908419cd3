package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
	"github.com/seed-e6610ed6/sample-controller/pkg/reconcile"
)

// limitName is the column of the limit.
const limitName = "limit"

// runLimit measures what a cold start of n Foos cannot beat on this machine: on a
// fresh cluster with n Foos, a client without rate limit makes the same writes a
// controller must make, one Deployment create and one status update per Foo, with
// --workers requests in flight. It is timed from its first request to the moment the
// watch has seen every Deployment and status, as a controller's cold start is.
//
// With rates, the same cluster then measures the limit of the reaction case at each
// rate: the bench follows every patch of a Foo at once with the Deployment update and
// the status update a controller would make, so the latency left is the apiserver's.
func runLimit(ctx context.Context, env *benchEnv, n int, rates []int) (coldStart, []reaction, error) {
	cs := coldStart{Foos: n}
	g, err := startGroup(ctx, env, fmt.Sprintf("%s-%d", limitName, n))
	if err != nil {
		return cs, nil, err
	}
	defer g.stop()

	foos, before, err := g.seedFoos(ctx, n)
	if err != nil {
		return cs, nil, err
	}

	progressf("%s: writing %d Deployments and statuses with %d requests in flight", g.name, n, env.cfg.workers)
	conv := newConvergence(foos, ruleReady)
	g.watch.setHandlers(conv.observeDeployment, conv.observeFoo)
	defer g.watch.setHandlers(nil, nil)
	start := time.Now()
	conv.begin(start)

	ctxWrite, cancel := context.WithTimeout(ctx, env.cfg.coldStartTimeout)
	defer cancel()
	// The Deployments as last written, for the reaction case's updates.
	deployments := make([]*appsv1.Deployment, n)
	writeErr := parallel(ctxWrite, n, env.cfg.workers, func(ctx context.Context, i int) error {
		var err error
		deployments[i], err = writeLikeController(ctx, g, foos[i])
		return err
	})
	if writeErr != nil && ctx.Err() == nil && ctxWrite.Err() == nil {
		return cs, nil, writeErr
	}
	if err := waitConverged(ctxWrite, g, conv, nil, env.cfg.coldStartTimeout); err != nil && ctx.Err() != nil {
		return cs, nil, err
	}
	cs.fill(conv, time.Since(start))
	if cs.Converged {
		progressf("%s: converged %d Foos in %.2f s", g.name, n, cs.Seconds)
	} else {
		progressf("%s: %s", g.name, cs.timedOutText())
	}
	if err := cs.countRequests(ctx, g, before); err != nil {
		return cs, nil, err
	}
	g.watch.setHandlers(nil, nil)
	if len(rates) == 0 {
		return cs, nil, nil
	}
	if !cs.Converged {
		progressf("%s: skipping the limit of the reaction case", g.name)
		return cs, nil, nil
	}

	writer := startLimitWriter(ctx, g, deployments, env.cfg.workers)
	defer writer.stop()
	var reactions []reaction
	for _, rate := range rates {
		r, err := runReaction(ctx, g, limitName, nil, writer.changed, rate)
		r.WriteErrors = writer.takeFailures()
		if r.WriteErrors > 0 {
			progressf("%s: %d of the limit's writes failed at %d/s", g.name, r.WriteErrors, rate)
		}
		if err != nil {
			return cs, reactions, err
		}
		reactions = append(reactions, r)
	}
	return cs, reactions, nil
}

// limitWriter makes, for the limit of the reaction case, the writes a controller makes
// when a Foo's spec changed: the Deployment update, then the status update. It hears
// of each change from the patch's response, so no watch stands in between, and it
// works as a controller does: a work queue that holds each Foo once, and --workers
// workers.
type limitWriter struct {
	g     *group
	queue workqueue.TypedInterface[int]
	wg    sync.WaitGroup

	mu          sync.Mutex
	latest      map[int]*samplev1alpha1.Foo // by index, as the last patch left it
	deployments []*appsv1.Deployment        // by index, as last written
	failed      int
}

func startLimitWriter(ctx context.Context, g *group, deployments []*appsv1.Deployment, workers int) *limitWriter {
	w := &limitWriter{
		g:           g,
		queue:       workqueue.NewTyped[int](),
		latest:      map[int]*samplev1alpha1.Foo{},
		deployments: deployments,
	}
	for range workers {
		w.wg.Go(func() {
			for w.work(ctx) {
			}
		})
	}
	return w
}

// changed is the follower: Foo i was patched to foo.
func (w *limitWriter) changed(i int, foo *samplev1alpha1.Foo) {
	w.mu.Lock()
	w.latest[i] = foo
	w.mu.Unlock()
	w.queue.Add(i)
}

func (w *limitWriter) work(ctx context.Context) bool {
	i, shutdown := w.queue.Get()
	if shutdown {
		return false
	}
	defer w.queue.Done(i)
	w.mu.Lock()
	foo, d := w.latest[i], w.deployments[i].DeepCopy()
	w.mu.Unlock()

	d, _ = reconcile.UpdateDeployment(foo, d)
	updated, err := w.g.kube.AppsV1().Deployments(foo.Namespace).Update(ctx, d, metav1.UpdateOptions{})
	if err == nil {
		w.mu.Lock()
		w.deployments[i] = updated
		w.mu.Unlock()
		err = writeStatus(ctx, w.g, foo, updated)
		if apierrors.IsConflict(err) {
			// A newer patch of this Foo came in meanwhile, and its change queued the
			// Foo again: that status write supersedes this one, as a controller's would.
			err = nil
		}
	}
	if err != nil && ctx.Err() == nil {
		w.mu.Lock()
		w.failed++
		first := w.failed == 1
		w.mu.Unlock()
		if first {
			progressf("%s: %v", w.g.name, err)
		}
		// A Deployment that may have changed on the server is read again, so that one
		// failure does not make every later update of this Foo conflict.
		if fresh, getErr := w.g.kube.AppsV1().Deployments(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{}); getErr == nil {
			w.mu.Lock()
			w.deployments[i] = fresh
			w.mu.Unlock()
		}
	}
	return true
}

// takeFailures returns how many writes failed since the last call.
func (w *limitWriter) takeFailures() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.failed
	w.failed = 0
	return n
}

// stop lets the workers finish what is queued, and waits for them.
func (w *limitWriter) stop() {
	w.queue.ShutDownWithDrain()
	w.wg.Wait()
}

// writeLikeController makes a controller's writes for a new Foo: it creates the
// Deployment, then writes the status. It returns the Deployment created.
func writeLikeController(ctx context.Context, g *group, foo *samplev1alpha1.Foo) (*appsv1.Deployment, error) {
	d, err := g.kube.AppsV1().Deployments(foo.Namespace).Create(ctx, reconcile.NewDeployment(foo), metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating Deployment %s: %w", foo.Spec.DeploymentName, err)
	}
	return d, writeStatus(ctx, g, foo, d)
}

// writeStatus writes the status our controller writes for foo whose Deployment is d.
func writeStatus(ctx context.Context, g *group, foo *samplev1alpha1.Foo, d *appsv1.Deployment) error {
	withStatus := foo.DeepCopy()
	withStatus.Status = reconcile.CalculateStatus(foo, d, nil, metav1.Now())
	_, err := g.sample.SamplecontrollerV1alpha1().Foos(foo.Namespace).UpdateStatus(ctx, withStatus, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("writing the status of Foo %s: %w", foo.Name, err)
	}
	return nil
}
