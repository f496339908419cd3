// The serving certificate of secure serving: from files, from --cert-dir, or
// self-signed in memory.

package serving

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"path/filepath"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
	"k8s.io/klog/v2"
)

// tlsConfig serves the certificate of the flags, and keeps serving the current one
// until ctx ends.
func (o *Options) tlsConfig(ctx context.Context, bindAddress string) (*tls.Config, error) {
	cert, err := o.servingCertificate(ctx, hostIP(bindAddress))
	if err != nil {
		return nil, err
	}
	base := &tls.Config{MinVersion: tls.VersionTLS12}
	certs := dynamiccertificates.NewDynamicServingCertificateController(base, nil, cert, nil, nil)
	cert.AddListener(certs)
	if err := certs.RunOnce(); err != nil {
		return nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	go certs.Run(1, ctx.Done())
	if files, ok := cert.(*dynamiccertificates.DynamicCertKeyPairContent); ok {
		go files.Run(ctx, 1)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: certs.GetConfigForClient}, nil
}

// servingCertificate is --tls-cert-file and --tls-private-key-file, or else the
// self-signed certificate in --cert-dir, or else a new one in memory.
func (o *Options) servingCertificate(ctx context.Context, ip net.IP) (dynamiccertificates.CertKeyContentProvider, error) {
	logger := klog.FromContext(ctx)
	if o.TLSCertFile != "" {
		return dynamiccertificates.NewDynamicServingContentFromFiles("serving-cert", o.TLSCertFile, o.TLSPrivateKeyFile)
	}
	var certFile, keyFile string
	if o.CertDir != "" {
		certFile, keyFile = filepath.Join(o.CertDir, o.PairName+".crt"), filepath.Join(o.CertDir, o.PairName+".key")
		present, err := certutil.CanReadCertAndKey(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		if present {
			logger.Info("Serving the certificate found in --cert-dir", "cert", certFile)
			return dynamiccertificates.NewDynamicServingContentFromFiles("serving-cert", certFile, keyFile)
		}
	}

	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if ip != nil && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	cert, key, err := certutil.GenerateSelfSignedCertKey("localhost", ips, nil)
	if err != nil {
		return nil, fmt.Errorf("generating a self-signed serving certificate: %w", err)
	}
	if o.CertDir == "" {
		logger.Info("Serving a self-signed certificate generated in memory")
		return dynamiccertificates.NewStaticCertKeyContent("self-signed serving cert", cert, key)
	}
	if err := certutil.WriteCert(certFile, cert); err != nil {
		return nil, err
	}
	if err := keyutil.WriteKey(keyFile, key); err != nil {
		return nil, err
	}
	logger.Info("Serving a self-signed certificate written to --cert-dir", "cert", certFile)
	return dynamiccertificates.NewDynamicServingContentFromFiles("serving-cert", certFile, keyFile)
}
