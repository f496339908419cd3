// CustomResourceDefinitions: applied from a manifest, and waited on until served.

package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// crdResource is served by every apiserver; a dynamic client spares this package the
// apiextensions module.
var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

const (
	// fieldManager owns what the harness applies.
	fieldManager = "localcluster"
	// crdTimeout bounds the wait for a CRD to be served, as kubectl wait --timeout=60s.
	crdTimeout = 60 * time.Second
)

// InstallCRD applies every CustomResourceDefinition in a YAML file, creating or
// updating each with server-side apply, and returns once their resources are served.
func InstallCRD(ctx context.Context, cfg *rest.Config, manifestPath string) error {
	crds, err := readCRDs(manifestPath)
	if err != nil {
		return err
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a dynamic client: %w", err)
	}
	names := make([]string, 0, len(crds))
	for _, crd := range crds {
		_, err := client.Resource(crdResource).Apply(ctx, crd.GetName(), crd, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
		if err != nil {
			return fmt.Errorf("applying CRD %s: %w", crd.GetName(), err)
		}
		names = append(names, crd.GetName())
	}
	return waitCRDs(ctx, client, names)
}

// WaitCRDsEstablished waits until the named CRDs are Established and their resources
// answer a list, for CRDs applied some other way (kubectl apply -k).
func WaitCRDsEstablished(ctx context.Context, cfg *rest.Config, names ...string) error {
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating a dynamic client: %w", err)
	}
	return waitCRDs(ctx, client, names)
}

// readCRDs decodes the documents of a YAML file, each of which must be a CRD.
func readCRDs(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var crds []*unstructured.Unstructured
	decoder := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var raw json.RawMessage
		if err := decoder.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if len(raw) == 0 || string(raw) == "null" {
			continue // an empty document, as between two "---"
		}
		obj := &unstructured.Unstructured{}
		if err := obj.UnmarshalJSON(raw); err != nil {
			return nil, fmt.Errorf("reading %s: %w", path, err)
		}
		if gvk := obj.GroupVersionKind(); gvk.GroupVersion() != crdResource.GroupVersion() || gvk.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("reading %s: %s %q is not a CustomResourceDefinition", path, gvk, obj.GetName())
		}
		crds = append(crds, obj)
	}
	if len(crds) == 0 {
		return nil, fmt.Errorf("reading %s: no CustomResourceDefinition in it", path)
	}
	return crds, nil
}

// waitCRDs polls until every named CRD is Established and a list of its resource
// succeeds: Established alone can come a moment before the resource is served.
func waitCRDs(ctx context.Context, client dynamic.Interface, names []string) error {
	for _, name := range names {
		var last error
		err := wait.PollUntilContextTimeout(ctx, pollInterval, crdTimeout, true, func(ctx context.Context) (bool, error) {
			last = crdServed(ctx, client, name)
			return last == nil, nil
		})
		if err != nil {
			return fmt.Errorf("waiting for CRD %s: %w (last check: %w)", name, err, last)
		}
	}
	return nil
}

// crdServed checks one CRD: its Established condition, then a list of its resource in
// the storage version.
func crdServed(ctx context.Context, client dynamic.Interface, name string) error {
	crd, err := client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	established := false
	for _, c := range conditions {
		c, _ := c.(map[string]any)
		if c["type"] == "Established" && c["status"] == "True" {
			established = true
		}
	}
	if !established {
		return fmt.Errorf("CRD %s is not Established", name)
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		v, _ := v.(map[string]any)
		if storage, _ := v["storage"].(bool); !storage {
			continue
		}
		version, _ := v["name"].(string)
		gvr := schema.GroupVersionResource{Group: group, Version: version, Resource: plural}
		_, err := client.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	}
	return fmt.Errorf("CRD %s has no storage version", name)
}
