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
	// ruleReady: status.observedGeneration equals metadata.generation and the status
	// has a Ready condition. Our controller, and the limit, write both.
	ruleReady statusRule = iota
	// ruleWritten: the status was written at least once through the status
	// subresource, as the Foo's managedFields record. For a controller of unknown
	// behaviour, such as the classic one, which only writes availableReplicas.
	ruleWritten
)

// MarshalText writes the rule into results.json in words.
func (r statusRule) MarshalText() ([]byte, error) {
	if r == ruleWritten {
		return []byte("status written at least once (a managedFields entry for the status subresource)"), nil
	}
	return []byte("status.observedGeneration == metadata.generation and a Ready condition"), nil
}

func (r statusRule) satisfied(f *samplev1alpha1.Foo) bool {
	if r == ruleWritten {
		return slices.ContainsFunc(f.ManagedFields, func(e metav1.ManagedFieldsEntry) bool {
			return e.Subresource == "status"
		})
	}
	return f.Status.ObservedGeneration == f.Generation &&
		meta.FindStatusCondition(f.Status.Conditions, samplev1alpha1.ConditionReady) != nil
}

// deploymentMatches says whether d is the Deployment foo asks for: its name is
// spec.deploymentName (the key it was looked up by), its replicas are spec.replicas,
// and foo is its controller.
func deploymentMatches(d *appsv1.Deployment, foo *samplev1alpha1.Foo) bool {
	owner := metav1.GetControllerOf(d)
	return d.Spec.Replicas != nil && *d.Spec.Replicas == *foo.Spec.Replicas && owner != nil && owner.UID == foo.UID
}

// convergence is the collector of a cold start: from the watch events it records
// when each Deployment first appeared, and when every Deployment matched its Foo and
// every Foo's status satisfied the rule, all at once, and, if it counts Events, each
// Foo had its DeploymentCreated Event.
type convergence struct {
	rule  statusRule
	start time.Time // the origin of the times: the controller's start, or the limit's
	// events: the cold start is done only once every Foo has its DeploymentCreated
	// Event, which a controller may write after the status (in the background).
	events bool
	nEvent int

	mu           sync.Mutex
	byDeployment map[string]*fooProgress // by spec.deploymentName
	byUID        map[types.UID]*fooProgress
	nDep, nFoo   int       // Deployments that match, statuses that satisfy the rule
	arrivals     []float64 // seconds since start at which each Deployment first appeared
	statusTimes  []float64 // ... each Foo's status first satisfied the rule
	eventTimes   []float64 // ... each Foo's DeploymentCreated Event came
	doneAfter    time.Duration
	done         bool
}

type fooProgress struct {
	foo                                *samplev1alpha1.Foo
	arrived, deployment, status, event bool
	statusSeen                         bool // status has been true once
}

func newConvergence(foos []*samplev1alpha1.Foo, rule statusRule, start time.Time) *convergence {
	c := &convergence{rule: rule, start: start, byDeployment: map[string]*fooProgress{}, byUID: map[types.UID]*fooProgress{}}
	for _, f := range foos {
		p := &fooProgress{foo: f}
		c.byDeployment[f.Spec.DeploymentName], c.byUID[f.UID] = p, p
	}
	return c
}

func (c *convergence) observeDeployment(d *appsv1.Deployment, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok := c.byDeployment[d.Name]
	if !ok {
		return
	}
	if !p.arrived {
		p.arrived = true
		c.arrivals = append(c.arrivals, at.Sub(c.start).Seconds())
	}
	c.nDep += flip(&p.deployment, deploymentMatches(d, p.foo))
	c.checkDone(at)
}

func (c *convergence) observeFoo(f *samplev1alpha1.Foo, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.byUID[f.UID]; ok {
		c.nFoo += flip(&p.status, c.rule.satisfied(f))
		if p.status && !p.statusSeen {
			p.statusSeen = true
			c.statusTimes = append(c.statusTimes, at.Sub(c.start).Seconds())
		}
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

func (c *convergence) observeEvent(e *eventsv1.Event, at time.Time) {
	if e.Reason != reconcile.EventDeploymentCreated {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.byUID[e.Regarding.UID]; ok && !p.event {
		p.event = true
		c.nEvent++
		c.eventTimes = append(c.eventTimes, at.Sub(c.start).Seconds())
		c.checkDone(at)
	}
}

func (c *convergence) checkDone(at time.Time) {
	if !c.done && c.nDep == len(c.byUID) && c.nFoo == len(c.byUID) && (!c.events || c.nEvent == len(c.byUID)) {
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
		DeploymentsDone: c.nDep, StatusesDone: c.nFoo, Arrivals: slices.Sorted(slices.Values(c.arrivals)),
		StatusArrivals: slices.Sorted(slices.Values(c.statusTimes)),
	}
	if c.events {
		r.EventArrivals = slices.Sorted(slices.Values(c.eventTimes))
	}
	if c.done {
		r.Seconds = c.doneAfter.Seconds()
	}
	return r
}
