package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// limitName is the column and plot line of the limit.
const limitName = "limit"

// runLimit measures what a cold start of n Foos cannot beat on this machine: on a
// fresh cluster with n Foos, a client without rate limit makes the same writes a
// controller must make, one Deployment create and one status update per Foo, with
// --workers requests in flight. It is timed from its first request to the moment the
// watch has seen every Deployment and status, as a controller's cold start is.
func runLimit(ctx context.Context, env *benchEnv, n int) (coldStart, error) {
	g, err := startGroup(ctx, env, fmt.Sprintf("%s-%d", limitName, n))
	if err != nil {
		return coldStart{Foos: n}, err
	}
	defer g.stop()

	cs := coldStart{Foos: n}
	foos, err := g.createFoos(ctx, n)
	if err != nil {
		return cs, err
	}
	if err := g.watch.waitForFoos(ctx, n); err != nil {
		return cs, err
	}
	before, err := scrapeAPIServer(ctx, g.kube)
	if err != nil {
		return cs, err
	}

	progressf("%s: writing %d Deployments and statuses with %d requests in flight", g.name, n, env.cfg.workers)
	conv := newConvergence(foos, ruleReady)
	g.watch.setHandlers(conv.observeDeployment, conv.observeFoo)
	defer g.watch.setHandlers(nil, nil)
	start := time.Now()
	conv.begin(start)

	ctxWrite, cancel := context.WithTimeout(ctx, env.cfg.coldStartTimeout)
	defer cancel()
	writeErr := parallel(ctxWrite, n, env.cfg.workers, func(ctx context.Context, i int) error {
		return writeLikeController(ctx, g, foos[i])
	})
	if writeErr != nil && ctx.Err() == nil && ctxWrite.Err() == nil {
		return cs, writeErr
	}
	if err := waitConverged(ctxWrite, g, conv, nil, env.cfg.coldStartTimeout); err != nil && ctx.Err() != nil {
		return cs, err
	}
	cs.fill(conv, time.Since(start))
	if cs.Converged {
		progressf("%s: converged %d Foos in %.2f s", g.name, n, cs.Seconds)
	} else {
		progressf("%s: %s", g.name, cs.timedOutText())
	}
	return cs, cs.countRequests(ctx, g, before)
}

// writeLikeController makes a controller's writes for a new Foo: it creates the
// Deployment, then writes the status.
func writeLikeController(ctx context.Context, g *group, foo *samplev1alpha1.Foo) error {
	_, err := g.kube.AppsV1().Deployments(foo.Namespace).Create(ctx, limitDeployment(foo), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Deployment %s: %w", foo.Spec.DeploymentName, err)
	}
	withStatus := foo.DeepCopy()
	withStatus.Status = limitStatus(foo, metav1.Now())
	_, err = g.sample.SamplecontrollerV1alpha1().Foos(foo.Namespace).UpdateStatus(ctx, withStatus, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("writing the status of Foo %s: %w", foo.Name, err)
	}
	return nil
}

// limitDeployment is a Deployment of the shape our controller creates for foo.
func limitDeployment(foo *samplev1alpha1.Foo) *appsv1.Deployment {
	labels := map[string]string{"samplecontroller.k8s.io/foo-uid": string(foo.UID)}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{
			Name:            foo.Spec.DeploymentName,
			Namespace:       foo.Namespace,
			Labels:          labels,
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(foo, samplev1alpha1.SchemeGroupVersion.WithKind("Foo"))},
		},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(*foo.Spec.Replicas),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "nginx", Image: "nginx:latest"}}},
			},
		},
	}
}

// limitStatus is the status of a Foo whose Deployment was just created and has no
// status yet, as our controller writes it.
func limitStatus(foo *samplev1alpha1.Foo, now metav1.Time) samplev1alpha1.FooStatus {
	return samplev1alpha1.FooStatus{
		ObservedGeneration: foo.Generation,
		Conditions: []metav1.Condition{{
			Type:               samplev1alpha1.ConditionReady,
			Status:             metav1.ConditionFalse,
			Reason:             samplev1alpha1.ReasonDeploymentProgressing,
			Message:            "Deployment has 0 of 1 replicas available",
			ObservedGeneration: foo.Generation,
			LastTransitionTime: now,
		}},
	}
}
