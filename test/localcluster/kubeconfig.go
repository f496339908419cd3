// Kubeconfigs of the cluster's users, self-contained so that they can be copied.

package localcluster

import (
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig that authenticates with a client certificate and
// carries everything inline, so it stays valid wherever it is copied.
func writeKubeconfig(path, server string, caPEM []byte, cert keyPair) error {
	const name = "localcluster"
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{ClientCertificateData: cert.certPEM, ClientKeyData: cert.keyPEM}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	cfg.CurrentContext = name
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	return os.Chmod(path, 0o600)
}
