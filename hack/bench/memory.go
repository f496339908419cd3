package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// heapMetric is the Go heap in use, as our controller's /metrics reports it.
const heapMetric = "go_memstats_heap_inuse_bytes"

// memory is the controller's memory with its Foos converged, before and after
// Deployments it has nothing to do with appear in another namespace.
type memory struct {
	Foos      int   `json:"foos"`
	Unrelated int   `json:"unrelatedDeployments"`
	RSSBefore int64 `json:"rssBeforeBytes"`
	RSSAfter  int64 `json:"rssAfterBytes"`
	// RSSPer10k is (after - before) scaled to 10000 unrelated Deployments.
	RSSPer10k float64 `json:"rssPer10kUnrelatedBytes"`
	// The heap figures are there only when the controller serves /metrics.
	HeapBefore *float64 `json:"heapInuseBeforeBytes,omitempty"`
	HeapAfter  *float64 `json:"heapInuseAfterBytes,omitempty"`
	HeapPer10k *float64 `json:"heapInusePer10kUnrelatedBytes,omitempty"`
	// TimedOut says how far the creation got when it ran out of --memory-timeout.
	TimedOut string `json:"timedOut,omitempty"`
}

// runMemory reads the controller's memory (after --settle), creates
// --unrelated-deployments Deployments in another namespace, waits --settle, and reads
// it again. Then it deletes them.
func runMemory(ctx context.Context, g *group, c controllerSpec, proc *controllerProcess) (memory, error) {
	cfg := g.env.cfg
	mem := memory{Foos: cfg.steadyFoos, Unrelated: cfg.unrelated}
	if err := sleep(ctx, cfg.settle); err != nil {
		return mem, err
	}
	var err error
	if mem.RSSBefore, err = proc.rssBytes(); err != nil {
		return mem, err
	}
	mem.HeapBefore = readHeap(ctx, proc)

	progressf("%s: creating %d unrelated Deployments", g.name, cfg.unrelated)
	began := time.Now()
	created, err := createUnrelated(ctx, g, cfg.unrelated, cfg.memoryTimeout)
	if err != nil {
		return mem, err
	}
	if created < cfg.unrelated {
		mem.TimedOut = fmt.Sprintf("timed out: %d of %d created after %.0f s", created, cfg.unrelated, time.Since(began).Seconds())
		progressf("%s: %s", g.name, mem.TimedOut)
	} else {
		progressf("%s: created %d unrelated Deployments in %v", g.name, created, time.Since(began).Round(time.Millisecond))
	}
	mem.Unrelated = created
	if err := sleep(ctx, cfg.settle); err != nil {
		return mem, err
	}
	if mem.RSSAfter, err = proc.rssBytes(); err != nil {
		return mem, err
	}
	mem.HeapAfter = readHeap(ctx, proc)

	if created > 0 {
		scale := 10000 / float64(created)
		mem.RSSPer10k = float64(mem.RSSAfter-mem.RSSBefore) * scale
		if mem.HeapBefore != nil && mem.HeapAfter != nil {
			mem.HeapPer10k = ptr.To((*mem.HeapAfter - *mem.HeapBefore) * scale)
		}
	}
	progressf("%s: %s RSS %.1f -> %.1f MiB", g.name, c.name, mib(mem.RSSBefore), mib(mem.RSSAfter))
	if err := deleteUnrelated(ctx, g); err != nil {
		// The figures stand; the cases after this one run with the Deployments left.
		progressf("%s: %v", g.name, err)
	}
	return mem, ctx.Err()
}

// deleteUnrelated deletes the unrelated Deployments again, so that the cases after
// this one run against an apiserver with the same objects as the limit's.
func deleteUnrelated(ctx context.Context, g *group) error {
	began := time.Now()
	deployments := g.kube.AppsV1().Deployments(unrelatedNamespace)
	if err := deployments.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		// A request timeout leaves the apiserver deleting; the wait tells.
		progressf("%s: deleting the unrelated Deployments: %v", g.name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, g.env.cfg.memoryTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := deployments.List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the unrelated Deployments to be gone: %w", err)
	}
	progressf("%s: deleted the unrelated Deployments in %v", g.name, time.Since(began).Round(time.Millisecond))
	return sleep(ctx, g.env.cfg.settle)
}

// readHeap reads the controller's heap in use, or nil when it has no /metrics.
func readHeap(ctx context.Context, proc *controllerProcess) *float64 {
	url := proc.metricsURL()
	if url == "" {
		return nil
	}
	v, err := scrapeGauge(ctx, url, heapMetric)
	if err != nil {
		progressf("reading %s from %s: %v", heapMetric, url, err)
		return nil
	}
	return &v
}

// createUnrelated creates n Deployments no Foo owns, in parallel, and returns how many
// were created before timeout.
func createUnrelated(ctx context.Context, g *group, n int, timeout time.Duration) (int, error) {
	ctxCreate, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var created atomic.Int64
	err := parallel(ctxCreate, n, g.env.cfg.parallelism, func(ctx context.Context, i int) error {
		_, err := g.kube.AppsV1().Deployments(unrelatedNamespace).Create(ctx, unrelatedDeployment(i), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating an unrelated Deployment: %w", err)
		}
		created.Add(1)
		return nil
	})
	if err != nil && ctx.Err() == nil && ctxCreate.Err() == nil {
		return int(created.Load()), err
	}
	return int(created.Load()), ctx.Err()
}

// unrelatedDeployment is the i-th Deployment of the memory case.
func unrelatedDeployment(i int) *appsv1.Deployment {
	labels := map[string]string{"app": "unrelated", "index": fmt.Sprint(i)}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("unrelated-%05d", i), Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "nginx:latest"}}},
			},
		},
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
