// Package v1alpha1 is the v1alpha1 version of the samplecontroller.k8s.io API.
//
// +k8s:deepcopy-gen=package
// +groupName=samplecontroller.k8s.io
package v1alpha1
