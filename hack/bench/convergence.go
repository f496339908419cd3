package main

import (
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

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

func (r statusRule) String() string {
	if r == ruleWritten {
		return "status written at least once (a managedFields entry for the status subresource)"
	}
	return "status.observedGeneration == metadata.generation and a Ready condition"
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

// wantDeployment is what a Foo's Deployment must look like.
type wantDeployment struct {
	fooUID   types.UID
	replicas int32
}

// deploymentMatches says whether d is the Deployment the Foo asks for: its name is
// spec.deploymentName (the key it was looked up by), its replicas are spec.replicas,
// and the Foo is its controller.
func deploymentMatches(d *appsv1.Deployment, want wantDeployment) bool {
	if d.Spec.Replicas == nil || *d.Spec.Replicas != want.replicas {
		return false
	}
	owner := metav1.GetControllerOf(d)
	return owner != nil && owner.UID == want.fooUID
}

// convergence follows a cold start from the watch events: it records when each
// Deployment first appeared, and signals done once every Deployment matches its Foo
// and every Foo's status satisfies the rule, all at once.
type convergence struct {
	rule statusRule

	mu         sync.Mutex
	start      time.Time
	want       map[string]wantDeployment // by Deployment name
	fooUIDs    map[types.UID]bool
	depOK      map[string]bool
	fooOK      map[types.UID]bool
	nDep, nFoo int
	arrived    map[string]bool
	arrivals   []time.Duration // since start, in arrival order
	done       chan struct{}
	doneAfter  time.Duration
}

// newConvergence expects the Deployments of foos. Times count from begin.
func newConvergence(foos []*samplev1alpha1.Foo, rule statusRule) *convergence {
	c := &convergence{
		rule:    rule,
		start:   time.Now(),
		want:    make(map[string]wantDeployment, len(foos)),
		fooUIDs: make(map[types.UID]bool, len(foos)),
		depOK:   make(map[string]bool, len(foos)),
		fooOK:   make(map[types.UID]bool, len(foos)),
		arrived: make(map[string]bool, len(foos)),
		done:    make(chan struct{}),
	}
	for _, f := range foos {
		c.want[f.Spec.DeploymentName] = wantDeployment{fooUID: f.UID, replicas: *f.Spec.Replicas}
		c.fooUIDs[f.UID] = true
	}
	return c
}

// begin sets the origin of the times: the start of the controller, or of the limit's
// requests.
func (c *convergence) begin(start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.start = start
}

func (c *convergence) observeDeployment(d *appsv1.Deployment, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	want, ok := c.want[d.Name]
	if !ok {
		return
	}
	if !c.arrived[d.Name] {
		c.arrived[d.Name] = true
		c.arrivals = append(c.arrivals, at.Sub(c.start))
	}
	c.nDep += flip(c.depOK, d.Name, deploymentMatches(d, want))
	c.checkDone(at)
}

func (c *convergence) observeFoo(f *samplev1alpha1.Foo, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.fooUIDs[f.UID] {
		return
	}
	c.nFoo += flip(c.fooOK, f.UID, c.rule.satisfied(f))
	c.checkDone(at)
}

// flip sets m[k] to v and returns the change in the number of true values.
func flip[K comparable](m map[K]bool, k K, v bool) int {
	was := m[k]
	m[k] = v
	switch {
	case v && !was:
		return 1
	case was && !v:
		return -1
	}
	return 0
}

func (c *convergence) checkDone(at time.Time) {
	if c.nDep < len(c.want) || c.nFoo < len(c.fooUIDs) {
		return
	}
	select {
	case <-c.done:
	default:
		c.doneAfter = at.Sub(c.start)
		close(c.done)
	}
}

// progress is how many Deployments match and how many statuses satisfy the rule.
func (c *convergence) progress() (deployments, statuses int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nDep, c.nFoo
}

// arrivalSeconds are the times the Deployments first appeared, in seconds since start.
func (c *convergence) arrivalSeconds() []float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]float64, len(c.arrivals))
	for i, a := range c.arrivals {
		out[i] = a.Seconds()
	}
	slices.Sort(out)
	return out
}
