package cached

import (
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/reconcile"
	"github.com/seed-e6610ed6/sample-controller/internal/test/fakeapiserver"
	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

// newFoo is a Foo named name, asking for a Deployment of its name.
func newFoo(name string, replicas *int32) *samplev1alpha1.Foo {
	return &samplev1alpha1.Foo{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, UID: types.UID(name + "-uid"), Generation: 1},
		Spec:       samplev1alpha1.FooSpec{DeploymentName: name, Replicas: replicas},
	}
}

var (
	earlier = metav1.NewTime(time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC))
	now     = metav1.NewTime(time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC))
)

// servedDeployment is foo's Deployment as the API server serves it once it is
// available: with the defaults, annotations, conditions and managedFields that the
// controller's cache trims.
func servedDeployment(foo *samplev1alpha1.Foo) *appsv1.Deployment {
	d := reconcile.NewDeployment(foo)
	d.UID = "web-deployment-uid"
	d.ResourceVersion = "1"
	d.Generation = 1
	n := reconcile.DesiredReplicas(foo)
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	d.CreationTimestamp = earlier
	d.Annotations = map[string]string{"deployment.kubernetes.io/revision": "1"}
	d.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "sample-controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "apps/v1"}}
	d.Spec.Strategy = appsv1.DeploymentStrategy{
		Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxUnavailable: ptr.To(intstr.FromString("25%")),
			MaxSurge:       ptr.To(intstr.FromString("25%")),
		},
	}
	d.Spec.RevisionHistoryLimit = ptr.To[int32](10)
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](600)
	pod := &d.Spec.Template.Spec
	pod.RestartPolicy = corev1.RestartPolicyAlways
	pod.TerminationGracePeriodSeconds = ptr.To[int64](30)
	pod.DNSPolicy = corev1.DNSClusterFirst
	pod.SecurityContext = &corev1.PodSecurityContext{}
	pod.SchedulerName = corev1.DefaultSchedulerName
	c := &pod.Containers[0]
	c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	c.ImagePullPolicy = corev1.PullAlways
	d.Status.Conditions = []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, LastUpdateTime: earlier, LastTransitionTime: earlier,
			Reason: "MinimumReplicasAvailable", Message: "Deployment has minimum availability."},
		{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, LastUpdateTime: earlier, LastTransitionTime: earlier,
			Reason: "NewReplicaSetAvailable", Message: `ReplicaSet "web-6d4cf56db6" has successfully progressed.`},
	}
	return d
}

// TestCachedDeploymentDecidesAsTheFullOne checks that the cache keeps every field the
// controller reads: from the cached copy it computes the same status and the same
// need to write as from the Deployment the API server serves, and the patch it makes
// from the cached copy turns the served Deployment into what an update from the
// full one would have written.
func TestCachedDeploymentDecidesAsTheFullOne(t *testing.T) {
	foo := newFoo("web", ptr.To[int32](2))
	tests := []struct {
		name   string
		mutate func(d *appsv1.Deployment)
	}{
		{"as created", func(*appsv1.Deployment) {}},
		{"replicas drifted", func(d *appsv1.Deployment) { d.Spec.Replicas = ptr.To[int32](9) }},
		{"image drifted", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = "nginx:1.0" }},
		{"image drifted behind a sidecar", func(d *appsv1.Deployment) {
			c := d.Spec.Template.Spec.Containers
			c[0].Image = "nginx:1.0"
			d.Spec.Template.Spec.Containers = append([]corev1.Container{{Name: "sidecar", Image: "envoy", Args: []string{"-v"}}}, c...)
		}},
		{"container renamed", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Name = "web" }},
		{"containers removed", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers = nil }},
		{"labels drifted, others added", func(d *appsv1.Deployment) {
			d.Labels = map[string]string{reconcile.FooUIDLabel: "stale", "team": "blue"}
		}},
		{"labels removed", func(d *appsv1.Deployment) { d.Labels = nil }},
		{"template labels lost", func(d *appsv1.Deployment) { d.Spec.Template.Labels = map[string]string{"team": "blue"} }},
		{"selector of an older controller", func(d *appsv1.Deployment) {
			d.Spec.Selector = &metav1.LabelSelector{
				MatchLabels:      map[string]string{"app": "web"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpExists}},
			}
			d.Spec.Template.Labels = map[string]string{"app": "web", "tier": "front"}
		}},
		{"rollout restarted and replicas drifted", func(d *appsv1.Deployment) {
			d.Spec.Template.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-11-22T09:00:00Z"}
			d.Spec.Replicas = ptr.To[int32](1)
		}},
		{"progress deadline exceeded", func(d *appsv1.Deployment) {
			d.Status.Conditions[1] = appsv1.DeploymentCondition{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
				Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "web-6d4cf56db6" has timed out progressing.`}
		}},
		{"rolling out", func(d *appsv1.Deployment) {
			d.Generation = 3
			d.Status.ObservedGeneration = 2
			d.Status.UpdatedReplicas = 1
			d.Status.ReadyReplicas = 1
			d.Status.AvailableReplicas = 1
		}},
		{"being deleted", func(d *appsv1.Deployment) { d.DeletionTimestamp = &now }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			full := servedDeployment(foo)
			tt.mutate(full)
			trimmed := cached(t, full.DeepCopy()).Full()

			if diff := cmp.Diff(reconcile.CalculateStatus(foo, full, nil, now), reconcile.CalculateStatus(foo, trimmed, nil, now)); diff != "" {
				t.Errorf("status from the cached copy differs (-full +cached):\n%s", diff)
			}
			want, wantChanged := reconcile.UpdateDeployment(foo, full)
			fromTrimmed, changed := reconcile.UpdateDeployment(foo, trimmed)
			if changed != wantChanged {
				t.Fatalf("changed from the cached copy = %v, from the full one %v", changed, wantChanged)
			}
			patch, err := reconcile.DeploymentPatch(trimmed, fromTrimmed)
			if err != nil {
				t.Fatal(err)
			}
			got, err := fakeapiserver.Patched(full, types.StrategicMergePatchType, patch)
			if err != nil {
				t.Fatalf("patch %s does not apply: %v", patch, err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("patch %s, from the cached copy, writes other than an update from the full one (-update +patch):\n%s", patch, diff)
			}
		})
	}
}

// cached is d as the informer caches it.
func cached(t testing.TB, d *appsv1.Deployment) *Deployment {
	t.Helper()
	obj, err := TrimDeployment(d)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*Deployment)
}

// TestCachedDeploymentRoundTrips checks that caching the Deployment a cached one gives
// back changes nothing, that a deep copy is equal and shares nothing, and that what is
// not a Deployment (a tombstone) passes through.
func TestCachedDeploymentRoundTrips(t *testing.T) {
	served := servedDeployment(newFoo("web", ptr.To[int32](2)))
	served.Status.Conditions[1].Status = corev1.ConditionFalse // kept
	once := cached(t, served)
	if !once.SelectsLabels || once.Selector != nil || !once.TemplateHasLabels || once.TemplateLabels != nil {
		t.Errorf("a selector and template labels equal to the labels are kept as %v, %v and %v, %v; want them said so", once.Selector, once.SelectsLabels, once.TemplateLabels, once.TemplateHasLabels)
	}
	if once.Labels != nil || len(once.LabelPairs) != 2 || once.LabelPairs[1] != string(once.OwnerReferences[0].UID) {
		t.Errorf("labels kept as %v and %v, want only the pairs", once.Labels, once.LabelPairs)
	}
	twice := cached(t, once.Full())
	if diff := cmp.Diff(once, twice); diff != "" {
		t.Errorf("caching the Deployment it gives back changed the copy (-once +twice):\n%s", diff)
	}

	copied := once.DeepCopyObject().(*Deployment)
	if diff := cmp.Diff(once, copied); diff != "" {
		t.Errorf("DeepCopyObject differs (-cached +copy):\n%s", diff)
	}
	copied.LabelPairs[1] = "changed"
	copied.OwnerReferences[0].Name = "changed"
	copied.Containers[0].Image = "changed"
	*copied.Replicas = 7
	copied.Status.Conditions[0].Reason = "changed"
	if diff := cmp.Diff(twice, once); diff != "" {
		t.Errorf("writing to the copy changed the original (-before +after):\n%s", diff)
	}

	tombstone := cache.DeletedFinalStateUnknown{Key: "default/web", Obj: once}
	if got, _ := TrimDeployment(tombstone); !cmp.Equal(got, tombstone) {
		t.Errorf("TrimDeployment(tombstone) = %v, want it unchanged", got)
	}
}

// BenchmarkDeploymentCache reports the heap a cached Deployment costs as the API
// server serves it (but for managedFields, which every cache drops) and as the
// controller's informer caches it, decoded from the same JSON.
//
//	go test -run '^$' -bench DeploymentCache -benchtime 20000x ./internal/cached
func BenchmarkDeploymentCache(b *testing.B) {
	served, err := json.Marshal(servedDeployment(newFoo("example-foo-00001", ptr.To[int32](1))))
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		transform func(any) (any, error)
	}{{"served", func(obj any) (any, error) {
		obj.(*appsv1.Deployment).ManagedFields = nil
		return obj, nil
	}}, {"cached", TrimDeployment}} {
		b.Run(c.name, func(b *testing.B) {
			reportHeapPer(b, "Deployment", func() (any, error) {
				d := &appsv1.Deployment{}
				if err := json.Unmarshal(served, d); err != nil {
					return nil, err
				}
				return c.transform(d)
			})
		})
	}
}

// TestCacheFoo checks that the Foo informer's transform keeps what the controller
// reads and nothing else: a Foo whose labels, annotations, finalizers and owner
// references a tenant filled is cached as a plain one is. It also checks that two Foos
// decoded apart, and cached a garbage collection apart, share the strings every Foo
// repeats.
func TestCacheFoo(t *testing.T) {
	decoded := func(name string, fill bool) *samplev1alpha1.Foo {
		foo := newFoo(name, ptr.To[int32](1))
		foo.TypeMeta = metav1.TypeMeta{APIVersion: samplev1alpha1.SchemeGroupVersion.String(), Kind: "Foo"}
		foo.ResourceVersion = "7"
		foo.DeletionTimestamp = &now
		foo.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
		foo.Status = reconcile.CalculateStatus(foo, servedDeployment(foo), nil, now)
		if fill {
			filled(foo, 1<<20)
		}
		data, err := json.Marshal(foo)
		if err != nil {
			t.Fatal(err)
		}
		out := &samplev1alpha1.Foo{}
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	want := decoded("web", false)
	want.ManagedFields = nil
	want.CreationTimestamp = metav1.Time{}
	var a, b *samplev1alpha1.Foo
	for i, foo := range []*samplev1alpha1.Foo{decoded("web", true), decoded("api", false)} {
		got, err := TrimFoo(foo)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			a = got.(*samplev1alpha1.Foo)
		} else {
			b = got.(*samplev1alpha1.Foo)
		}
		runtime.GC() // a Foo cached later shares with one cached earlier still
	}
	if diff := cmp.Diff(want, a); diff != "" {
		t.Errorf("TrimFoo of a filled Foo did not keep exactly what a plain one keeps (-want +got):\n%s", diff)
	}
	same := func(x, y string) bool { return unsafe.StringData(x) == unsafe.StringData(y) }
	ca, cb := a.Status.Conditions[0], b.Status.Conditions[0]
	for what, shares := range map[string]bool{
		"apiVersion":       same(a.APIVersion, b.APIVersion),
		"kind":             same(a.Kind, b.Kind),
		"namespace":        same(a.Namespace, b.Namespace),
		"condition type":   same(ca.Type, cb.Type),
		"condition status": same(string(ca.Status), string(cb.Status)),
		"condition reason": same(ca.Reason, cb.Reason),
		"deploymentName":   same(a.Spec.DeploymentName, a.Name),
	} {
		if !shares {
			t.Errorf("the %s is not shared", what)
		}
	}
	tombstone := cache.DeletedFinalStateUnknown{Key: "default/web", Obj: a}
	if got, _ := TrimFoo(tombstone); !cmp.Equal(got, tombstone) {
		t.Errorf("TrimFoo(tombstone) = %v, want it unchanged", got)
	}
}

// filled gives foo about size bytes of what a tenant may write and the controller never
// reads: annotations, labels, finalizers and owner references.
func filled(foo *samplev1alpha1.Foo, size int) {
	quarter := size / 4
	foo.Annotations = map[string]string{"example.com/blob": strings.Repeat("a", quarter)}
	foo.Labels = map[string]string{}
	for i := 0; i < quarter/80; i++ {
		foo.Labels[fmt.Sprintf("example.com/label-%06d", i)] = strings.Repeat("v", 50)
	}
	for i := 0; i < quarter/60; i++ {
		foo.Finalizers = append(foo.Finalizers, fmt.Sprintf("example.com/finalizer-%030d", i))
	}
	for i := 0; i < quarter/120; i++ {
		foo.OwnerReferences = append(foo.OwnerReferences, metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: fmt.Sprintf("owner-%06d", i), UID: types.UID(fmt.Sprintf("uid-%030d", i))})
	}
}

// BenchmarkFooCache reports the heap a cached Foo costs, plain and with 1 MiB of
// labels, annotations, finalizers and owner references, each decoded from its JSON
// and trimmed as the Foo informer trims it.
//
//	go test -run '^$' -bench FooCache -benchtime 2000x ./internal/cached
func BenchmarkFooCache(b *testing.B) {
	for _, c := range []struct {
		name string
		fill int
	}{{"plain", 0}, {"1MiB-of-metadata", 1 << 20}} {
		foo := newFoo("example-foo-00001", ptr.To[int32](1))
		foo.Status = reconcile.CalculateStatus(foo, servedDeployment(foo), nil, now)
		if c.fill > 0 {
			filled(foo, c.fill)
		}
		data, err := json.Marshal(foo)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(c.name, func(b *testing.B) {
			reportHeapPer(b, "Foo", func() (any, error) {
				foo := &samplev1alpha1.Foo{}
				if err := json.Unmarshal(data, foo); err != nil {
					return nil, err
				}
				return TrimFoo(foo)
			})
		})
	}
}

// reportHeapPer keeps b.N objects that cache makes, and reports the heap each holds
// once the garbage made along the way is collected, as heap-bytes/unit.
func reportHeapPer(b *testing.B, unit string, cache func() (any, error)) {
	kept := make([]any, b.N)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range kept {
		var err error
		if kept[i], err = cache(); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(b.N), "heap-bytes/"+unit)
	runtime.KeepAlive(kept)
}
