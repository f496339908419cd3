package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// profiler takes CPU profiles of the apiserver and of the controller while a case
// runs (--profile), and writes them next to the results, for `go tool pprof`.
type profiler struct {
	wg sync.WaitGroup
}

// startProfiles starts CPU profiles of the apiserver and, when it serves them, of the
// controller, each for d, written to <out>/<group>-<what>-{apiserver,controller}.pprof.
// proc is nil when the bench itself makes the controller's writes. wait returns once
// both are written.
func startProfiles(ctx context.Context, g *group, proc *controllerProcess, what string, d time.Duration) *profiler {
	p := &profiler{}
	seconds := max(1, int(d.Round(time.Second)/time.Second))
	save := func(who string, data []byte, err error) {
		path := filepath.Join(g.env.cfg.outDir, fmt.Sprintf("%s-%s-%s.pprof", g.name, what, who))
		if err == nil {
			err = os.WriteFile(path, data, 0o644)
		}
		if err != nil {
			progressf("%s: profiling the %s: %v", g.name, who, err)
			return
		}
		progressf("%s: wrote %s", g.name, path)
	}
	p.wg.Go(func() {
		data, err := g.kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", fmt.Sprint(seconds)).Timeout(d + time.Minute).DoRaw(ctx)
		save("apiserver", data, err)
	})
	if proc == nil {
		return p
	}
	url := proc.metricsURL()
	if url == "" {
		progressf("%s: the controller serves no metrics, so no profile of it", g.name)
		return p
	}
	url = strings.TrimSuffix(url, "/metrics") + fmt.Sprintf("/debug/pprof/profile?seconds=%d", seconds)
	p.wg.Go(func() {
		data, err := getURL(ctx, url)
		save("controller", data, err)
	})
	return p
}

func (p *profiler) wait() { p.wg.Wait() }
