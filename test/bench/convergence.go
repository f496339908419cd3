package main

import (
	"fmt"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// statusRule decides when a Foo's status counts as done in a cold start.
type statusRule int

const (
	// ruleReady: observedGeneration is the generation and there is a Ready condition.
	ruleReady statusRule = iota
	// ruleWritten: the status subresource was written, as managedFields record: for
	// another controller, such as the classic one (it writes only availableReplicas).
	ruleWritten
)

func (r statusRule) satisfied(f *samplev1alpha1.Foo) bool {
	if r == ruleWritten {
		return slices.ContainsFunc(f.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
			return e.Subresource == "status"
		})
	}
	return f.Status.ObservedGeneration == f.Generation &&
		meta.FindStatusCondition(f.Status.Conditions, samplev1alpha1.ConditionReady) != nil
}

// deploymentMatches says whether d, named spec.deploymentName, is as foo asks: its
// replicas and its controller.
func deploymentMatches(d *appsv1.Deployment, foo *samplev1alpha1.Foo) bool {
	owner := metav1.GetControllerOf(d)
	return d.Spec.Replicas != nil && *d.Spec.Replicas == *foo.Spec.Replicas && owner != nil && owner.UID == foo.UID
}

// convergence is the collector of a cold start: from the watch events it records
// when every Deployment matched its Foo and every Foo's status satisfied the rule, all
// at once, and, if it counts Events, each Foo had its DeploymentCreated Event.
type convergence struct {
	rule  statusRule
	start time.Time // the origin of the times: the controller's start, or the limit's
	// events: done only once every Foo has its DeploymentCreated Event too.
	events bool

	mu                 sync.Mutex
	byDeployment       map[string]*fooProgress // by spec.deploymentName
	byUID              map[types.UID]*fooProgress
	nDep, nFoo, nEvent int // Deployments that match, statuses that satisfy the rule, Events
	// depsAfter and statusesAfter are when every Deployment, and every status, was
	// last seen done, until the whole is: the work a user waits for, and its report.
	depsAfter, statusesAfter time.Duration
	doneAfter                time.Duration
	done                     bool
}

type fooProgress struct {
	foo                       *samplev1alpha1.Foo
	deployment, status, event bool
}

func newConvergence(foos []*samplev1alpha1.Foo, rule statusRule, start time.Time) *convergence {
	c := &convergence{rule: rule, start: start, byDeployment: map[string]*fooProgress{}, byUID: map[types.UID]*fooProgress{}, depsAfter: -1, statusesAfter: -1}
	for _, f := range foos {
		p := &fooProgress{foo: f}
		c.byDeployment[f.Spec.DeploymentName], c.byUID[f.UID] = p, p
	}
	return c
}

func (c *convergence) observeDeployment(d *appsv1.Deployment, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.byDeployment[d.Name]; ok {
		c.nDep += flip(&p.deployment, deploymentMatches(d, p.foo))
		c.checkDone(at)
	}
}

func (c *convergence) observeFoo(f *samplev1alpha1.Foo, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.byUID[f.UID]; ok {
		c.nFoo += flip(&p.status, c.rule.satisfied(f))
		c.checkDone(at)
	}
}

func (c *convergence) observeEvent(e *eventsv1.Event, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.byUID[e.Regarding.UID]; ok && e.Reason == reconcile.EventDeploymentCreated {
		c.nEvent += flip(&p.event, true)
		c.checkDone(at)
	}
}

// flip sets *b to v and returns the change in the number of true values.
func flip(b *bool, v bool) int {
	was := *b
	*b = v
	switch {
	case v && !was:
		return 1
	case was && !v:
		return -1
	}
	return 0
}

// countEvents makes the cold start wait for every Foo's DeploymentCreated Event.
func (c *convergence) countEvents() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = true
}

func (c *convergence) checkDone(at time.Time) {
	if c.done {
		return
	}
	n := len(c.byUID)
	// Each time the last one is done: one may fall behind and come back.
	if c.nDep == n && c.depsAfter < 0 {
		c.depsAfter = at.Sub(c.start)
	}
	if c.nDep < n {
		c.depsAfter = -1
	}
	if c.nFoo == n && c.statusesAfter < 0 {
		c.statusesAfter = at.Sub(c.start)
	}
	if c.nFoo < n {
		c.statusesAfter = -1
	}
	if c.nDep == n && c.nFoo == n && (!c.events || c.nEvent == n) {
		c.done, c.doneAfter = true, at.Sub(c.start)
	}
}

func (c *convergence) isDone() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

func (c *convergence) progress() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	progress := fmt.Sprintf("%d of %d Deployments, %d of %d statuses", c.nDep, len(c.byUID), c.nFoo, len(c.byUID))
	if c.events {
		progress += fmt.Sprintf(", %d of %d Events", c.nEvent, len(c.byUID))
	}
	return progress
}

// result is the cold start as far as it got; waited is the time waited, for one
// that did not converge.
func (c *convergence) result(waited time.Duration) coldStartResult {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := coldStartResult{
		Foos: len(c.byUID), Converged: c.done, Seconds: waited.Seconds(),
		DeploymentsDone: c.nDep, StatusesDone: c.nFoo,
	}
	if c.done {
		r.Seconds = c.doneAfter.Seconds()
		r.DeploymentsSeconds, r.StatusesSeconds = c.depsAfter.Seconds(), c.statusesAfter.Seconds()
	}
	return r
}
