// The Foo type and its spec and status: the API this controller serves, from which the
// clients, listers, informers, apply configurations and the CRD are generated.

package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Foo asks for a Deployment of nginx Pods with a given name and number of replicas.
// The controller creates that Deployment, owns it, keeps it as the Foo says, and
// reports its progress in the Foo's status.
//
// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
// +kubebuilder:resource:path=foos,singular=foo,scope=Namespaced,shortName=fo,categories=samplecontroller
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=unapproved, experimental-only"
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.spec.deploymentName`,description="Name of the Deployment this Foo owns"
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`,description="Replicas asked for"
// +kubebuilder:printcolumn:name="Available",type=integer,JSONPath=`.status.availableReplicas`,description="Replicas available for at least minReadySeconds"
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`,description="Whether the Deployment has rolled out and is available"
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,description="Why the Foo is or is not ready"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Foo struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the user asks for.
	// +required
	Spec FooSpec `json:"spec"`
	// status is what the controller last observed. Until it has written one, the API
	// server serves observedGeneration 0, so that kstatus and the tools that use it
	// read a new Foo as in progress rather than as current.
	// +optional
	// +kubebuilder:default={observedGeneration: 0}
	Status FooStatus `json:"status,omitempty"`
}

// FooSpec is the desired state of a Foo.
type FooSpec struct {
	// deploymentName is the name of the Deployment that this Foo creates and owns in
	// its own namespace. It must be a valid DNS-1123 subdomain. Changing it replaces
	// the Deployment: one under the new name is created and the old one is deleted.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="!format.dns1123Subdomain().validate(self).hasValue()",message="must be a valid DNS-1123 subdomain: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
	DeploymentName string `json:"deploymentName"`

	// replicas is the number of nginx Pods the Deployment runs. Defaults to 1.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=2147483647
	Replicas *int32 `json:"replicas,omitempty"`
}

// FooStatus is the observed state of a Foo.
type FooStatus struct {
	// observedGeneration is the metadata.generation of the Foo that this status
	// describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// replicas is the number of Pods the owned Deployment has, of any version.
	// The scale subresource reads it.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// readyReplicas is the number of the Deployment's Pods that are ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// availableReplicas is the number of the Deployment's Pods that have been ready
	// for at least the Deployment's minReadySeconds.
	// +optional
	AvailableReplicas int32 `json:"availableReplicas"`

	// selector is the label selector of the Deployment's Pods, in the string form
	// that `kubectl get pods -l` takes. The scale subresource reads it.
	// +optional
	Selector string `json:"selector,omitempty"`

	// conditions describe the Foo's state. The Ready condition is True once the
	// Deployment has rolled out the current spec and all its replicas are available.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// deployments are the Deployments the controller created for this Foo and has not
	// deleted: the only ones it updates or deletes. Once the Foo has one, a Deployment
	// that names the Foo as its controller without being listed here got that reference
	// from someone else; the controller reports it as not owned and leaves it alone.
	// A Foo without any (new, or last synced by the classic sample-controller) has the
	// Deployment under its deploymentName that it controls recorded.
	// +optional
	// +listType=map
	// +listMapKey=name
	Deployments []CreatedDeployment `json:"deployments,omitempty"`
}

// CreatedDeployment is a Deployment the controller created for a Foo, or is creating.
type CreatedDeployment struct {
	// name is the Deployment's name.
	// +required
	Name string `json:"name"`

	// uid is the Deployment's UID, once the controller has seen it created.
	// +optional
	UID types.UID `json:"uid,omitempty"`

	// creating is set while the controller creates the Deployment, before it knows
	// its UID: the SHA-256, in hex, of the token it puts on the Deployment's
	// samplecontroller.k8s.io/creation-token annotation, which no one else knows until
	// the Deployment exists. A Deployment of this name found with that token after a
	// restart is the one the controller created.
	// +optional
	Creating string `json:"creating,omitempty"`
}

// Condition types of a Foo. Ready is always there once the controller has synced the
// Foo; Reconciling and Stalled are there only while True, with Ready's reason and
// message. With status.observedGeneration they are what kstatus reads
// (sigs.k8s.io/cli-utils/pkg/kstatus, as Flux, Helm's --wait and kpt use it): a Foo is
// Current when Ready, InProgress while Reconciling, and Failed when Stalled.
const (
	// ConditionReady is True when the Deployment runs the current spec with every
	// replica available.
	ConditionReady = "Ready"
	// ConditionReconciling is True while the Deployment is being created, scaled or
	// rolled out (Ready's reason is DeploymentProgressing).
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the Foo cannot converge until someone acts: its
	// Deployment name is taken, the Deployment was refused, or its rollout exceeded its
	// progress deadline (Ready's reason is DeploymentNotOwned, DeploymentRejected or
	// DeploymentFailed). The controller still retries.
	ConditionStalled = "Stalled"
)

// Reasons of the Ready condition, and of Reconciling or Stalled when they are there.
const (
	// ReasonDeploymentAvailable: the Deployment has rolled out and all replicas are
	// available (Ready=True).
	ReasonDeploymentAvailable = "DeploymentAvailable"
	// ReasonDeploymentProgressing: the Deployment is being created, scaled or rolled
	// out (Ready=False).
	ReasonDeploymentProgressing = "DeploymentProgressing"
	// ReasonDeploymentFailed: the Deployment reports that its rollout cannot make
	// progress, for example it exceeded its progress deadline (Ready=False).
	ReasonDeploymentFailed = "DeploymentFailed"
	// ReasonDeploymentNotOwned: a Deployment with the requested name exists and is
	// not controlled by this Foo, so the controller leaves it alone (Ready=False).
	ReasonDeploymentNotOwned = "DeploymentNotOwned"
	// ReasonDeploymentRejected: the API server refused to create or update the
	// Deployment, for example an admission policy or webhook, a quota, or missing
	// permissions; the message has its answer. The controller retries with backoff
	// (Ready=False).
	ReasonDeploymentRejected = "DeploymentRejected"
)

// FooList is a list of Foos.
//
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object
// +kubebuilder:object:root=true
type FooList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata"`

	Items []Foo `json:"items"`
}
