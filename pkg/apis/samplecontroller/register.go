// Package samplecontroller holds the API group name shared by every version.
package samplecontroller

// GroupName is the API group of the Foo resource.
const GroupName = "samplecontroller.k8s.io"
