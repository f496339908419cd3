package reconcile

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplev1alpha1 "github.com/seed-e6610ed6/sample-controller/pkg/apis/samplecontroller/v1alpha1"
)

func TestCreated(t *testing.T) {
	foo := &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "foo-uid"}, Spec: samplev1alpha1.FooSpec{DeploymentName: "web"}}
	key := []byte("key")
	token := CreationToken(key, foo, "web")
	// deployment is a Deployment named web, with token unless it is empty.
	deployment := func(token string) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "d-uid"}}
		if token != "" {
			d.Annotations = map[string]string{CreationTokenAnnotation: token}
		}
		return d
	}
	recorded := []samplev1alpha1.CreatedDeployment{{Name: "web", UID: "d-uid"}}
	creating := []samplev1alpha1.CreatedDeployment{{Name: "web", Creating: TokenHash(token)}}
	for _, tc := range []struct {
		name    string
		records []samplev1alpha1.CreatedDeployment
		d       *appsv1.Deployment
		want    bool
	}{
		{"recorded by its UID", recorded, deployment(""), true},
		{"another Deployment of the recorded name", []samplev1alpha1.CreatedDeployment{{Name: "web", UID: "other"}}, deployment(""), false},
		{"no record", nil, deployment(token), false},
		{"the record of another name", []samplev1alpha1.CreatedDeployment{{Name: "api", UID: "d-uid"}}, deployment(""), false},
		{"being created, with its token", creating, deployment(token), true},
		{"being created, with another token", creating, deployment(CreationToken([]byte("other key"), foo, "web")), false},
		{"being created, the record's hash as its token", creating, deployment(TokenHash(token)), false},
		{"being created, without a token", creating, deployment(""), false},
		{"a record with neither UID nor hash", []samplev1alpha1.CreatedDeployment{{Name: "web"}}, deployment(""), false},
	} {
		if got := Created(tc.records, tc.d); got != tc.want {
			t.Errorf("%s: Created = %t, want %t", tc.name, got, tc.want)
		}
	}
	if CreationToken(key, foo, "web") == CreationToken(key, foo, "api") || CreationToken(key, foo, "web") == CreationToken([]byte("other"), foo, "web") {
		t.Error("creation tokens do not differ by name and key")
	}
}

func TestUnrecorded(t *testing.T) {
	synced := &samplev1alpha1.Foo{ObjectMeta: metav1.ObjectMeta{Name: "web", Generation: 1}, Spec: samplev1alpha1.FooSpec{DeploymentName: "web"}}
	synced.Status = CalculateStatus(synced, &appsv1.Deployment{}, nil, metav1.Now())
	taken := synced.DeepCopy()
	taken.Status = CalculateStatus(taken, nil, ErrNotOwned, metav1.Now())
	recorded := synced.DeepCopy()
	recorded.Status.Deployments = []samplev1alpha1.CreatedDeployment{{Name: "web", UID: "d-uid"}}
	for _, tc := range []struct {
		name string
		foo  *samplev1alpha1.Foo
		want bool
	}{
		{"synced, without records", synced, true},
		{"never synced", &samplev1alpha1.Foo{}, true},
		{"its name reported taken", taken, false},
		{"with records", recorded, false},
	} {
		if got := Unrecorded(tc.foo); got != tc.want {
			t.Errorf("%s: Unrecorded = %t, want %t", tc.name, got, tc.want)
		}
	}
}

func TestRecords(t *testing.T) {
	records := []samplev1alpha1.CreatedDeployment{{Name: "web", UID: "1"}}
	set := SetRecord(records, samplev1alpha1.CreatedDeployment{Name: "web", UID: "2"})
	added := SetRecord(set, samplev1alpha1.CreatedDeployment{Name: "api", UID: "3"})
	dropped := DropRecord(added, "web")
	if records[0].UID != "1" {
		t.Errorf("SetRecord changed the records it was given: %v", records)
	}
	if len(set) != 1 || set[0].UID != "2" || len(added) != 2 || len(dropped) != 1 || dropped[0].Name != "api" {
		t.Errorf("set %v, added %v, dropped %v", set, added, dropped)
	}
}
