// The simulated nodes: the Node objects kwok plays the kubelet of, and the harness's
// admin client that creates them and waits until they are Ready.

package localcluster

import (
	"context"
	"fmt"
	"runtime"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const (
	// kwok manages only the nodes carrying this annotation.
	kwokNodeAnnotation      = "kwok.x-k8s.io/node"
	kwokNodeAnnotationValue = "fake"

	// NodeLabel marks the simulated nodes; its value is "kwok".
	NodeLabel = "type"

	// podCIDR is where kwok takes Pod IPs from; apart from the service range, and
	// never routed.
	podCIDR = "10.244.0.0/16"

	notReadyTaint = "node.kubernetes.io/not-ready"
)

// client is the harness's own access to the cluster, as the admin.
type client struct {
	kubernetes.Interface
}

func newClient(cfg *rest.Config) (*client, error) {
	// Polling for readiness should not wait on the client-side rate limit.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating admin client: %w", err)
	}
	return &client{cs}, nil
}

func (c *client) defaultServiceAccountExists(ctx context.Context) error {
	_, err := c.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
	return err
}

// createNodes creates the Node objects kwok then plays the kubelet of.
func (c *client) createNodes(ctx context.Context, n int) ([]string, error) {
	names := make([]string, 0, n)
	for i := range n {
		node := newNode(fmt.Sprintf("kwok-node-%d", i))
		_, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating node %s: %w", node.Name, err)
		}
		names = append(names, node.Name)
	}
	return names, nil
}

// newNode builds a simulated node with room for many Pods; kwok fills in the rest of
// its status.
func newNode(name string) *corev1.Node {
	resources := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{kwokNodeAnnotation: kwokNodeAnnotationValue},
			Labels: map[string]string{
				NodeLabel:                       "kwok",
				corev1.LabelHostname:            name,
				corev1.LabelOSStable:            "linux",
				corev1.LabelArchStable:          runtime.GOARCH,
				"node-role.kubernetes.io/agent": "",
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    resources,
			Allocatable: resources.DeepCopy(),
		},
	}
}

// nodesReady succeeds once every named node is Ready and, when the controller manager
// runs, no longer carries the not-ready taint.
func (c *client) nodesReady(ctx context.Context, names []string, untainted bool) error {
	for _, name := range names {
		node, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !nodeReady(node) {
			return fmt.Errorf("node %s is not Ready", name)
		}
		if !untainted {
			continue
		}
		for _, t := range node.Spec.Taints {
			if t.Key == notReadyTaint {
				return fmt.Errorf("node %s still has the %s taint", name, notReadyTaint)
			}
		}
	}
	return nil
}

func nodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
