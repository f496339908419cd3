// Package election runs work only while this process holds a Lease, with client-go's
// leader election, in the order that keeps two holders from ever working at once: on
// cancellation the work stops first and the Lease is released after; a Lease lost
// while the work runs, or still finishes after being asked to stop, is reported at once
// and not released.
package election

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
)

// Config is one election.
type Config struct {
	// Lock is the Lease's lock (Lease.NewLock), whose Lease's Name also names the
	// election in client-go's metrics and logs. The work's context carries its tenure,
	// so that its writes pass a tenure.Gate only while it is valid. A read of the Lease
	// that shows another holder while the work runs ends the tenure and the election at
	// once, and is reported to OnLost.
	Lock     *LeaseLock
	WatchDog *leaderelection.HealthzAdaptor
	// OnLost is called when the Lease is lost while the work runs, also when it was
	// asked to stop and its last writes are still finishing. It must end every write of
	// the work at once: the controller exits. The work's context is cancelled too, but
	// a standby may take the Lease before the work has noticed.
	OnLost func()
	// OnNewLeader, if set, is told every holder the election observes.
	OnNewLeader func(identity string)
}

// Lease is the one shape of the lease settings, in single-leader and sharded mode
// alike: component-base's LeaderElectionConfiguration's resource namespace and name
// and client-go's timings, with the identity this process holds Leases under. In
// sharded mode Name names the group, the prefix of its Leases.
type Lease struct {
	Namespace, Name string
	Identity        string
	// Duration is how long a Lease lasts without renewal before another replica may
	// take it; RenewDeadline, how long a holder keeps trying to renew it before it
	// gives up; RetryPeriod, how often replicas try to acquire or renew it.
	Duration, RenewDeadline, RetryPeriod time.Duration
}

// Result is how an election ended.
type Result struct {
	// Worked is whether the work ran: this process held the Lease.
	Worked bool
	// Err is the work's.
	Err error
	// ReleaseErr is the release's, once the work returned or the wait was cancelled:
	// another holder then waits for the Lease to expire.
	ReleaseErr error
}

// Run runs work only while this process holds the Lease, until ctx is cancelled or the
// work returns. On cancellation the work stops first and the Lease is released after,
// so that the next holder never works alongside this one; releasing hands over in
// about one retry period instead of a lease duration. Cancelling ctx before the Lease
// is held ends the wait.
func Run(ctx context.Context, cfg Config, work func(context.Context) error) Result {
	t := &electionRun{ctx: ctx, cfg: cfg, work: work, workDone: make(chan struct{}), reportLost: func() {}}
	// Once, whichever of the elector and the tenure's lock sees the loss first.
	if cfg.OnLost != nil {
		t.reportLost = sync.OnceFunc(cfg.OnLost)
	}
	// The election outlives ctx: it ends when work has returned, or when ctx is
	// cancelled before this process ever held the Lease.
	electionCtx, endElection := context.WithCancel(context.WithoutCancel(ctx))
	defer endElection()
	t.endElection = endElection
	stopWaiting := context.AfterFunc(ctx, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.working {
			endElection()
		}
	})
	defer stopWaiting()

	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            &watchedLock{LeaseLock: cfg.Lock, onOtherHolder: t.onOtherHolder},
		LeaseDuration:   cfg.Lock.lease.Duration,
		RenewDeadline:   cfg.Lock.lease.RenewDeadline,
		RetryPeriod:     cfg.Lock.lease.RetryPeriod,
		ReleaseOnCancel: false, // released below, once work has returned
		WatchDog:        cfg.WatchDog,
		Name:            cfg.Lock.lease.Name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: t.startedLeading,
			OnStoppedLeading: t.stoppedLeading,
			OnNewLeader: func(identity string) {
				if cfg.OnNewLeader != nil {
					cfg.OnNewLeader(identity)
				}
			},
		},
	})
	if err != nil {
		return Result{Err: fmt.Errorf("setting up the election of %s: %w", cfg.Lock.lease.Name, err)}
	}
	elector.Run(electionCtx)
	return t.end()
}

// electionRun is one election's state, shared by the elector's callbacks.
type electionRun struct {
	ctx         context.Context
	cfg         Config
	work        func(context.Context) error
	reportLost  func()
	endElection context.CancelFunc

	mu       sync.Mutex
	working  bool // work has started
	worked   bool // work has returned
	over     bool // the elector has returned: work may no longer start
	workDone chan struct{}
	result   Result
}

// onOtherHolder is told by the Lease lock that a read of the Lease shows another
// holder: if the work runs, the Lease is lost now, not after client-go's renew
// deadline, and the elector stops leading.
func (t *electionRun) onOtherHolder() {
	t.mu.Lock()
	lost := t.working && !t.worked
	t.mu.Unlock()
	if lost {
		t.reportLost()
		t.endElection()
	}
}

// startedLeading runs the work while the Lease is held. client-go runs it on a
// goroutine of its own, which may start after the elector has already stopped leading.
func (t *electionRun) startedLeading(leaderCtx context.Context) {
	t.mu.Lock()
	if t.ctx.Err() != nil || t.over || leaderCtx.Err() != nil {
		t.mu.Unlock()
		t.endElection()
		return
	}
	t.working = true
	t.mu.Unlock()
	defer close(t.workDone)
	// A Lease this process had to create may have been deleted under a holder still
	// writing: the tenure begins the longest Lease duration later.
	if wait := t.cfg.Lock.Tenure().Pending(); wait > 0 {
		klog.FromContext(t.ctx).Info("Created the Lease; acting once a whole lease duration has passed, in case it was deleted under a holder that still writes", "lease", t.cfg.Lock.lease.Name, "wait", wait)
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-leaderCtx.Done():
		case <-t.ctx.Done():
		}
		timer.Stop()
	}
	// Asked to stop before the tenure began: the process stops now, as one asked to
	// before it led, and the Lease expires (Release leaves a Lease it created within
	// the wait).
	if t.ctx.Err() != nil && t.cfg.Lock.Tenure().Pending() > 0 {
		t.mu.Lock()
		t.working = false
		t.mu.Unlock()
		t.endElection()
		return
	}
	// Work stops when asked to (ctx) or when the Lease is lost (leaderCtx). Its writes
	// are held to the tenure.
	workCtx, cancel := context.WithCancel(tenure.NewContext(leaderCtx, t.cfg.Lock.Tenure()))
	defer cancel()
	stop := context.AfterFunc(t.ctx, cancel)
	defer stop()
	err := t.work(workCtx)
	t.mu.Lock()
	t.worked, t.result.Err = true, err
	t.mu.Unlock()
	t.endElection()
}

// stoppedLeading reports a Lease lost while working, also while the work drains after
// ctx was cancelled: its last writes could land after the next holder's first.
func (t *electionRun) stoppedLeading() {
	t.mu.Lock()
	lost := t.working && !t.worked
	t.mu.Unlock()
	if lost {
		t.reportLost()
	}
}

// end waits, once the elector has returned, for the work to return, releases the
// Lease when this process held it or may have, and returns the result.
func (t *electionRun) end() Result {
	t.mu.Lock()
	t.over = true
	started := t.working
	t.mu.Unlock()
	if started {
		// The elector cancelled the work's context when it stopped leading; this
		// returns only once the work has, so that the caller may hand the slot on.
		<-t.workDone
	}
	t.mu.Lock()
	result := t.result
	result.Worked = t.worked
	askedOnly := !t.working && t.ctx.Err() != nil
	t.mu.Unlock()
	if !result.Worked && !askedOnly {
		return result
	}
	// The release ends the tenure before the Lease is given up: the work has
	// returned, and no write of it may follow.
	releaseCtx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), t.cfg.Lock.lease.RenewDeadline)
	defer cancel()
	// When the work ran, the Lease is handed over now rather than after it expires.
	// When the wait for it was cancelled, an update of it whose answer the
	// cancellation cut off may still have been committed, naming this process as the
	// holder of a Lease that nobody renews: it is released too, or the next holder
	// waits for it to expire. A Lease this process created, or may have, is left to
	// expire within the wait its create began (Release).
	_, result.ReleaseErr = t.cfg.Lock.Release(releaseCtx)
	return result
}

// watchedLock tells the electionRun when a read of the Lease shows another holder, or none.
type watchedLock struct {
	*LeaseLock
	onOtherHolder func()
}

func (l *watchedLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	record, raw, err := l.LeaseLock.Get(ctx)
	if (err == nil && record.HolderIdentity != l.Identity()) || apierrors.IsNotFound(err) {
		l.onOtherHolder()
	}
	return record, raw, err
}
