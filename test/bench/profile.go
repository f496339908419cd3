package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"time"
)

// startProfiles takes CPU profiles (--profile) of the apiserver and, when it serves
// them, of the controller, or for a limit of the bench itself, each over d, into
// <out>/<session>-<what>-{apiserver,controller,bench}.pprof, for go tool pprof. The wait it
// returns returns once both are written.
func startProfiles(ctx context.Context, s *session, what string, d time.Duration) (wait func()) {
	var wg sync.WaitGroup
	seconds := fmt.Sprint(max(1, int(d.Round(time.Second)/time.Second)))
	profile := func(who string, get func() ([]byte, error)) {
		wg.Go(func() {
			path := filepath.Join(s.cfg.outDir, fmt.Sprintf("%s-%s-%s.pprof", s.name, what, who))
			data, err := get()
			if err == nil {
				err = os.WriteFile(path, data, 0o644)
			}
			if err != nil {
				progressf("%s: profiling the %s: %v", s.name, who, err)
			} else {
				progressf("%s: wrote %s", s.name, path)
			}
		})
	}
	profile("apiserver", func() ([]byte, error) {
		return s.kube.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", seconds).Timeout(d + time.Minute).DoRaw(ctx)
	})
	switch {
	case s.ctrl != nil:
		url := strings.TrimSuffix(s.ctrl.MetricsURL, "/metrics") + "/debug/pprof/profile?seconds=" + seconds
		profile("controller", func() ([]byte, error) {
			// A controller that has just started may not serve yet.
			for {
				data, err := getBody(ctx, url)
				if !errors.Is(err, syscall.ECONNREFUSED) || ctx.Err() != nil {
					return data, err
				}
				if err := sleep(ctx, 20*time.Millisecond); err != nil {
					return nil, err
				}
			}
		})
	case s.limit != nil:
		// The limit's writes (and a watching limit's informers) are this process's,
		// beside the watch that every side's cold start has.
		profile("bench", func() ([]byte, error) {
			var buf bytes.Buffer
			if err := pprof.StartCPUProfile(&buf); err != nil {
				return nil, err
			}
			err := sleep(ctx, d)
			pprof.StopCPUProfile()
			return buf.Bytes(), err
		})
	default:
		progressf("%s: the controller serves no metrics, so no profile of it", s.name)
	}
	return wg.Wait
}

// getBody returns the body of a GET of url, which must answer 200.
func getBody(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}
