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

// heapMetric is the Go heap in use, as our controller's /metrics reports it, and
// cpuMetric the CPU time its process has used.
const (
	heapMetric = "go_memstats_heap_inuse_bytes"
	cpuMetric  = "process_cpu_seconds_total"
)

// readMemory reads the controller's RSS and, when it serves /metrics, its Go heap in
// use and, if it says, the CPU seconds it has used since it started; heap and cpu are
// nil otherwise.
func (s *session) readMemory(ctx context.Context) (rss int64, heap, cpu *float64, err error) {
	if rss, err = s.proc.RSSBytes(); err != nil || s.ctrl == nil {
		return rss, nil, nil, err
	}
	m, err := s.ctrl.Metrics(ctx)
	if _, ok := m[heapMetric]; err == nil && !ok {
		err = fmt.Errorf("%s serves no %s", s.ctrl.MetricsURL, heapMetric)
	}
	if err != nil {
		progressf("%s: %v", s.name, err)
		return rss, nil, nil, nil
	}
	if _, ok := m[cpuMetric]; ok {
		cpu = ptr.To(m.Sum(cpuMetric, nil))
	}
	return rss, ptr.To(m.Sum(heapMetric, nil)), cpu, nil
}

// createUnrelated creates --unrelated-deployments Deployments no Foo owns, in
// parallel, and returns how many were created before --memory-timeout.
func (s *session) createUnrelated(ctx context.Context) (int, error) {
	ctxCreate, cancel := context.WithTimeout(ctx, s.cfg.memoryTimeout)
	defer cancel()
	var created atomic.Int64
	err := parallel(ctxCreate, s.cfg.unrelated, s.cfg.parallelism, func(ctx context.Context, i int) error {
		_, err := s.kube.AppsV1().Deployments(unrelatedNamespace).Create(ctx, unrelatedDeployment(i), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("creating an unrelated Deployment: %w", err)
		}
		created.Add(1)
		return nil
	})
	if ctx.Err() == nil && ctxCreate.Err() != nil {
		err = nil // --memory-timeout: the caller reports how far it got
	}
	return int(created.Load()), err
}

// deleteUnrelated deletes the unrelated Deployments and waits --settle.
func (s *session) deleteUnrelated(ctx context.Context) error {
	began := time.Now()
	deployments := s.kube.AppsV1().Deployments(unrelatedNamespace)
	if err := deployments.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		// A request timeout leaves the apiserver deleting; the wait tells.
		progressf("%s: deleting the unrelated Deployments: %v", s.name, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, s.cfg.memoryTimeout, true, func(ctx context.Context) (bool, error) {
		list, err := deployments.List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil && len(list.Items) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the unrelated Deployments to be gone: %w", err)
	}
	progressf("%s: deleted the unrelated Deployments in %v", s.name, time.Since(began).Round(time.Millisecond))
	return sleep(ctx, s.cfg.settle)
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
