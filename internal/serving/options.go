// The flags of secure serving, named as k8s.io/apiserver's options name them.

package serving

import (
	"errors"
	"flag"
	"strings"
)

// DefaultAlwaysAllowPaths are kube-controller-manager's: its probes.
var DefaultAlwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}

// Options are the flags of secure serving.
type Options struct {
	// TLSCertFile and TLSPrivateKeyFile are the serving certificate, reloaded when the
	// files change. Without them a self-signed certificate is served.
	TLSCertFile       string
	TLSPrivateKeyFile string
	// CertDir keeps the self-signed certificate across restarts: it is read from there,
	// or written there. Empty keeps a new one in memory.
	CertDir string
	// PairName names the self-signed certificate's files in CertDir: PairName.crt and
	// PairName.key.
	PairName string

	// AuthenticationKubeconfig and AuthorizationKubeconfig name the clusters that
	// review tokens and access. Empty means the component's own client configuration.
	AuthenticationKubeconfig string
	AuthorizationKubeconfig  string
	// AlwaysAllowPaths are served to anyone, without authentication. A trailing *
	// matches a prefix.
	AlwaysAllowPaths []string
}

// NewOptions returns the defaults: a self-signed certificate in memory, delegated
// authentication and authorization with the component's own credentials, and
// kube-controller-manager's always-allowed paths.
func NewOptions(pairName string) *Options {
	return &Options{PairName: pairName, AlwaysAllowPaths: append([]string(nil), DefaultAlwaysAllowPaths...)}
}

// AddFlags registers the flags under the names kube-controller-manager gives them.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "File with the x509 certificate to serve HTTPS with (and the CA certificates after it, if any); reloaded when it changes. Without it, a self-signed certificate for localhost is served.")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "File with the private key of --tls-cert-file.")
	fs.StringVar(&o.CertDir, "cert-dir", o.CertDir, "Directory to keep the self-signed certificate in, as "+o.PairName+".crt and "+o.PairName+".key: read when present, written otherwise. Empty keeps a new one in memory. Ignored with --tls-cert-file.")
	fs.StringVar(&o.AuthenticationKubeconfig, "authentication-kubeconfig", o.AuthenticationKubeconfig, "kubeconfig of the cluster that reviews the callers' bearer tokens (create tokenreviews.authentication.k8s.io). Empty means the controller's own (--kubeconfig, or in a Pod its ServiceAccount).")
	fs.StringVar(&o.AuthorizationKubeconfig, "authorization-kubeconfig", o.AuthorizationKubeconfig, "kubeconfig of the cluster that decides what callers may get (create subjectaccessreviews.authorization.k8s.io). Empty means the controller's own.")
	fs.Var((*pathList)(&o.AlwaysAllowPaths), "authorization-always-allow-paths", "Comma-separated paths served to anyone, without authentication or authorization; a trailing * matches a prefix.")
}

// Validate reports flags that cannot work together.
func (o *Options) Validate() error {
	var errs []error
	if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together"))
	}
	if _, err := newAllowedPaths(o.AlwaysAllowPaths); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// pathList is a comma-separated list flag; setting it replaces the default.
type pathList []string

func (l *pathList) String() string { return strings.Join(*l, ",") }

func (l *pathList) Set(value string) error {
	*l = nil
	for _, p := range strings.Split(value, ",") {
		if p = strings.TrimSpace(p); p != "" {
			*l = append(*l, p)
		}
	}
	return nil
}
