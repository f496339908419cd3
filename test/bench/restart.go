package main

import (
	"context"
	"fmt"
	"time"

	"github.com/seed-e6610ed6/sample-controller/test/localcluster"
)

// apiserverRestart is how a ratio side's apiserver was made fresh before the side
// began (--ratio-restart-apiserver).
type apiserverRestart struct {
	// CompactedTo is the revision etcd's history was compacted to first.
	CompactedTo int64 `json:"compactedTo"`
	// ReadySeconds is how long the restart took, until the apiserver was ready;
	// QuietSeconds how long after that its CPU took to fall below quietShare of a
	// core, or quietTimeout if it did not (Quiet false).
	ReadySeconds float64 `json:"readySeconds"`
	QuietSeconds float64 `json:"quietSeconds"`
	Quiet        bool    `json:"quiet"`
}

const (
	// quietShare is the share of a core under which the apiserver counts as done
	// with its start, over quietInterval.
	quietShare    = 0.05
	quietInterval = 500 * time.Millisecond
	quietTimeout  = 30 * time.Second
)

// restartAPIServer makes the shared cluster's apiserver fresh for s: it compacts
// etcd's history, as the apiserver does every 5 minutes (a restarted one compacts
// first 5 to 10 minutes after its start, so sides shorter than that, each on an
// apiserver of its own, would leave etcd's history to grow through the run),
// restarts kube-apiserver with the same flags, and waits until its start-up work is
// done. No side then inherits the watch caches, heap or etcd history that the sides
// before it left.
func (s *session) restartAPIServer(ctx context.Context) (*apiserverRestart, error) {
	var r apiserverRestart
	var err error
	if r.CompactedTo, err = s.cluster.CompactEtcd(ctx); err != nil {
		return nil, err
	}
	began := time.Now()
	if err := s.cluster.Restart(ctx, localcluster.ComponentAPIServer); err != nil {
		return nil, err
	}
	r.ReadySeconds = time.Since(began).Seconds()
	p := s.cluster.Component(localcluster.ComponentAPIServer)
	if p == nil {
		return nil, fmt.Errorf("the apiserver is not running after its restart")
	}
	ready := time.Now()
	r.Quiet, err = waitQuiet(ctx, p.Pid())
	if err != nil {
		return nil, err
	}
	r.QuietSeconds = time.Since(ready).Seconds()
	return &r, nil
}

// waitQuiet reads the CPU time of process pid every quietInterval until one interval
// used less than quietShare of a core, and says whether that came within quietTimeout.
func waitQuiet(ctx context.Context, pid int) (bool, error) {
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, quietTimeout)
	defer cancel()
	last, err := processCPU(pid)
	if err != nil {
		return false, err
	}
	ticker := time.NewTicker(quietInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return false, context.Cause(parent)
			}
			return false, nil // busy all along: go on, and say so
		case <-ticker.C:
		}
		now, err := processCPU(pid)
		if err != nil {
			return false, err
		}
		if now-last < quietShare*quietInterval.Seconds() {
			return true, nil
		}
		last = now
	}
}
