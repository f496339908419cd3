// The Lease lock: client-go's resource lock over one Lease, which keeps this process's
// tenure from its own writes and takes a Lease from another holder only once that
// holder's tenure must be over, whoever else has edited the Lease meanwhile.

package election

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/seed-e6610ed6/sample-controller/internal/tenure"
)

// ReleasedByAnnotation on a Lease with no holder names the holder that released it,
// and the Lease's UID: "IDENTITY UID". Only a release by the holder this process last
// saw holding the Lease hands it over early (a retry period and a second later, at
// most); a holder emptied by anyone else (kubectl edit, a script) is waited out.
const ReleasedByAnnotation = "samplecontroller.k8s.io/released-by"

// RetryPeriodAnnotation on a Lease is its holder's retry period, as a Go duration: how
// often it renews. A release another client forged in its name is taken back within
// that, so a standby waits at least the longest one it saw before it takes a release
// (ReleaseWait), whatever its own: a rollout may change the period.
const RetryPeriodAnnotation = "samplecontroller.k8s.io/retry-period"

// unseenHolder stands for the holder of a Lease whose record this process may not take
// yet and whose holder it never saw: it was emptied, or named this process, by someone
// else.
const unseenHolder = "(a holder this replica has not seen)"

// LeaseLock is client-go's resourcelock.Interface over one Lease. It differs from
// client-go's LeaseLock in what it shows the elector, so that a takeover respects the
// previous holder's tenure by the holder's own rules (see package tenure):
//
//   - A record counts as changed when its resourceVersion does, not its bytes: a
//     renewal within the same wall-clock second, which encodes to the same bytes, is a
//     renewal, and every renewal this lock writes moves renewTime on by at least a
//     microsecond, so that none is a no-op the API server would not store.
//   - The duration shown is the longest this process has seen the Lease carry, or its
//     own when longer: lowering leaseDurationSeconds shortens nobody's wait.
//   - A Lease held by another, or emptied or naming this process without this process
//     having written it, is shown held by its last holder (or unseenHolder) until its
//     record has been seen unchanged for that longest duration; then it is shown free,
//     and the elector takes it with an update conditional on that resourceVersion.
//     A release by the holder last seen (ReleasedByAnnotation) is free once it has
//     stood for a retry period and a write's flight (a second at most). Whoever may
//     update the Lease can write that mark: a holder still alive takes its Lease back
//     at its next renewal, a retry period after its last, before the release is free.
//     One by a holder this process never saw is waited out as any edit is: this
//     process cannot tell when that holder's tenure ended.
//   - A Lease this process has to create begins a tenure usable only after the longest
//     duration: it may have been deleted under a holder that has not noticed yet.
//
// The tenure ends before any write that names another holder, and at any read that
// shows another holder or no Lease. It is extended only by a write of this process
// that stored a new record.
type LeaseLock struct {
	client kubernetes.Interface
	lease  Lease
	labels map[string]string
	tenure *tenure.Tenure
	clock  clock.PassiveClock
	// seen, if set, is what something that watches the Lease (the slot observer) saw.
	seen func(resourceVersion string) (Observation, bool)

	mu      sync.Mutex
	current *coordinationv1.Lease // as last read or written; nil when missing
	// version is the resourceVersion last seen, since when by this process's clock;
	// watched, whether seen has told what it saw of that record.
	version string
	since   time.Time
	watched bool
	// longest is the longest duration the Lease has carried, or this process's own;
	// slowest the longest retry period its holders announced, or this process's own.
	longest, slowest time.Duration
	// previous is the holder of the last record that this process saw held by right:
	// by another, or by this process's own write.
	previous string
	// wrote is the resourceVersion of this process's last write naming itself, and
	// releasedAt that of its last release.
	wrote, releasedAt string
	// sentRenewal is the renewTime of the last write naming this process that it
	// sent, stored or not: a write whose answer was lost is known by it.
	sentRenewal time.Time
	// createSent is when this process last sent a create of the Lease, committed or
	// not, and createWait how long after it a holder the Lease was deleted under may
	// still write.
	createSent time.Time
	createWait time.Duration
}

var _ resourcelock.Interface = &LeaseLock{}

// LockOptions are a LeaseLock's optional parts.
type LockOptions struct {
	// Labels are set on the Lease at every write.
	Labels map[string]string
	// Seen tells what a watch of the Lease saw of a resourceVersion, if it saw it.
	Seen func(resourceVersion string) (Observation, bool)
	// Clock is the real clock when nil.
	Clock clock.PassiveClock
}

// Observation is what a watch of a Lease saw of one of its records.
type Observation struct {
	// At is when it first saw the record, by this process's clock.
	At time.Time
	// Holder is the last holder it saw the Lease name, in this record or before.
	Holder string
	// Longest is the longest duration it saw the Lease carry; Slowest, the longest
	// retry period it saw its holders announce (RetryPeriodAnnotation).
	Longest, Slowest time.Duration
}

// NewLock is the Lease lock of l, keeping t (nil: a tenure of its own).
func (l Lease) NewLock(client kubernetes.Interface, t *tenure.Tenure, opts LockOptions) *LeaseLock {
	clk := opts.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	if t == nil {
		t = tenure.New(clk)
	}
	return &LeaseLock{client: client, lease: l, labels: opts.Labels, tenure: t, clock: clk, seen: opts.Seen, longest: l.Duration, slowest: l.RetryPeriod}
}

// Tenure is the tenure this lock keeps.
func (l *LeaseLock) Tenure() *tenure.Tenure { return l.tenure }

func (l *LeaseLock) Identity() string   { return l.lease.Identity }
func (l *LeaseLock) Describe() string   { return l.lease.Namespace + "/" + l.lease.Name }
func (l *LeaseLock) RecordEvent(string) {}

// Get reads the Lease and returns the record the elector is to act on (see LeaseLock),
// and its raw form for the elector's comparisons, which changes with the
// resourceVersion.
func (l *LeaseLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	lease, err := l.client.CoordinationV1().Leases(l.lease.Namespace).Get(ctx, l.lease.Name, metav1.GetOptions{})
	l.mu.Lock()
	defer l.mu.Unlock()
	if apierrors.IsNotFound(err) {
		l.current = nil
		l.tenure.End()
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, err
	}
	l.current = lease
	record := l.showLocked(lease)
	if record.HolderIdentity != l.lease.Identity {
		l.tenure.End()
	}
	raw, err := json.Marshal(struct {
		Record          resourcelock.LeaderElectionRecord
		ResourceVersion string
	}{*record, lease.ResourceVersion})
	return record, raw, err
}

// showLocked is the record the elector is to act on, for lease as just read.
func (l *LeaseLock) showLocked(lease *coordinationv1.Lease) *resourcelock.LeaderElectionRecord {
	stored := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
	now := l.clock.Now()
	first := l.since.IsZero() || lease.ResourceVersion != l.version
	if first {
		l.version, l.since, l.watched = lease.ResourceVersion, now, false
	}
	if l.seen != nil && !l.watched {
		// Asked again at every read until the watch has seen this record: a read can
		// come before the watch's event, and a release by the holder the watch saw is
		// free after a retry period, not after a whole duration. A holder learnt that
		// late counts only if this process read none since: its own reads are newer.
		if seen, ok := l.seen(lease.ResourceVersion); ok {
			l.watched = true
			if seen.At.Before(l.since) {
				l.since = seen.At
			}
			if seen.Holder != "" && (first || l.previous == "") {
				l.previous = seen.Holder
			}
			l.longest = max(l.longest, min(seen.Longest, MaxLeaseDuration))
			l.slowest = max(l.slowest, seen.Slowest)
		}
	}
	l.slowest = max(l.slowest, AnnouncedRetryPeriod(lease))
	if d := time.Duration(stored.LeaseDurationSeconds) * time.Second; d > l.longest {
		l.longest = min(d, MaxLeaseDuration)
	}
	shown := *stored
	shown.LeaseDurationSeconds = int(l.longest / time.Second)
	holder, me := stored.HolderIdentity, l.lease.Identity
	// What this process's own writes gave it: a tenure that has not ended, though it
	// may not be usable yet (a Lease it created).
	left, _ := l.tenure.Left()
	lasting := left > 0
	// The holder to show while an edit is waited out.
	before := l.previous
	if before == "" || before == me {
		before = unseenHolder
	}
	switch {
	case holder == me && (l.ownLocked(lease) || lasting):
		// This process's own record (also one whose answer it lost), or one naming it
		// while its tenure from its own writes lasts: it renews it.
		l.previous = me
	case holder == "" && released(lease, l.previous, me, l.releasedAt):
		// Released by the holder this process last saw: free once the release has
		// stood for the flight of a write the releaser gave up on as it stopped, and
		// for a retry period, in which that holder, if it is alive and the mark
		// another client's, renews: it takes back a Lease emptied under it.
		if now.Before(l.since.Add(ReleaseWait(l.slowest, l.longest))) {
			shown.HolderIdentity = before
		}
	case !now.Before(l.since.Add(l.longest)):
		// Unchanged for the longest duration: whoever it names, nobody may act on it
		// any more.
		shown.HolderIdentity = ""
	case holder != "" && holder != me:
		l.previous = holder
	case holder == "" && l.previous == me && lasting:
		// Emptied under this process while its tenure lasts: it takes it back.
		shown.HolderIdentity = me
	default:
		// Emptied, or naming this process, by someone else: held by the holder before,
		// until the edit has stood for the longest duration.
		shown.HolderIdentity = before
	}
	return &shown
}

// ownLocked tells whether lease is a record this process wrote: the last it stored,
// or the last it sent, whose answer may have been lost. l.mu is held.
func (l *LeaseLock) ownLocked(lease *coordinationv1.Lease) bool {
	if lease.ResourceVersion == l.wrote {
		return true
	}
	renewed := lease.Spec.RenewTime
	return renewed != nil && !l.sentRenewal.IsZero() && renewed.Truncate(time.Microsecond).Equal(l.sentRenewal) &&
		ptr.Deref(lease.Spec.HolderIdentity, "") == l.lease.Identity
}

// MaxLeaseDuration bounds the durations a Lease lock counts: a typo in another
// client's edit (leaseDurationSeconds: 2147483647) would otherwise hold the Lease for
// decades. Holders are refused a longer duration (--leader-elect-lease-duration).
const MaxLeaseDuration = 5 * time.Minute

// released tells whether lease, with no holder, is a release by previous, the holder
// this process last saw ("" when it saw none): written by a release (Release), which
// marks it with the releaser and the Lease's UID and gives it a duration of one second.
// A holder emptied by anyone else has neither the mark nor, unless set with it, that
// duration, and a Lease restored from a copy has another UID. A release marked as
// this process's (me) is one only if it is the very record this process wrote
// (releasedAt): another may have held the Lease since, unseen. One naming a holder
// this process never saw is not: a merge patch can write the mark, the UID and the
// duration, and a process that never saw the holder cannot tell whether it still acts.
func released(lease *coordinationv1.Lease, previous, me, releasedAt string) bool {
	by, ok := ReleasedBy(lease)
	if !ok {
		return false
	}
	if by == me {
		return lease.ResourceVersion == releasedAt
	}
	return previous == by
}

// ReleasedBy is the holder that lease, with no holder, says released it, if it carries
// the marks of a release (ReleasedByAnnotation with the Lease's UID, a duration of one
// second). Whoever may update the Lease can write those marks: a release counts only
// from the holder the reader last saw, and only once it has stood for ReleaseWait.
func ReleasedBy(lease *coordinationv1.Lease) (string, bool) {
	by, uid, ok := strings.Cut(lease.Annotations[ReleasedByAnnotation], " ")
	if !ok || by == "" || uid != string(lease.UID) || ptr.Deref(lease.Spec.HolderIdentity, "") != "" ||
		ptr.Deref(lease.Spec.LeaseDurationSeconds, 0) != 1 {
		return "", false
	}
	return by, true
}

// ReleaseWait is how long a release by the holder last seen must stand before the
// Lease is free, given the longest retry period and duration seen: the flight of a write
// the releaser gave up on as it stopped, and a retry period, in which a holder still
// alive, the release being another client's, renews and takes its Lease back. Never
// longer than the duration, after which any record is free.
func ReleaseWait(retry, longest time.Duration) time.Duration {
	return min(longest, retry+min(tenure.MaxFlight, longest/10))
}

// AnnouncedRetryPeriod is the retry period lease's holder announced
// (RetryPeriodAnnotation), at most MaxLeaseDuration; 0 when it announced none.
func AnnouncedRetryPeriod(lease *coordinationv1.Lease) time.Duration {
	d, err := time.ParseDuration(lease.Annotations[RetryPeriodAnnotation])
	if err != nil || d < 0 {
		return 0
	}
	return min(d, MaxLeaseDuration)
}

// Create creates the Lease naming this process. The tenure it begins is usable only
// the longest duration later.
func (l *LeaseLock) Create(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	if record.HolderIdentity != l.lease.Identity {
		return fmt.Errorf("creating the Lease %s for %q: this lock creates it only for its own identity", l.Describe(), record.HolderIdentity)
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.lease.Name, Namespace: l.lease.Namespace, Labels: l.labels},
		Spec:       resourcelock.LeaderElectionRecordToLeaseSpec(&record),
	}
	metav1.SetMetaDataAnnotation(&lease.ObjectMeta, RetryPeriodAnnotation, l.lease.RetryPeriod.String())
	l.mu.Lock()
	wait := l.longest
	if lease.Spec.RenewTime != nil {
		l.sentRenewal = lease.Spec.RenewTime.Truncate(time.Microsecond)
	}
	sent := l.clock.Now()
	l.createSent, l.createWait = sent, max(time.Duration(record.LeaseDurationSeconds)*time.Second, wait)
	l.mu.Unlock()
	created, err := l.client.CoordinationV1().Leases(l.lease.Namespace).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.current, l.wrote, l.previous = created, created.ResourceVersion, l.lease.Identity
	l.version, l.since, l.watched = created.ResourceVersion, l.clock.Now(), true // its own: nothing to learn
	l.tenure.Created(sent, time.Duration(record.LeaseDurationSeconds)*time.Second, wait)
	return nil
}

// Update writes record over the Lease as last read, conditional on its
// resourceVersion. A write naming another holder (a release) ends the tenure before it
// is sent; one naming this process extends it from the moment it was sent, if the API
// server stored a new record.
func (l *LeaseLock) Update(ctx context.Context, record resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	if l.current == nil {
		l.mu.Unlock()
		return errors.New("updating the Lease before reading it")
	}
	lease := l.current.DeepCopy()
	l.mu.Unlock()

	mine := record.HolderIdentity == l.lease.Identity
	spec := resourcelock.LeaderElectionRecordToLeaseSpec(&record)
	if mine && lease.Spec.RenewTime != nil && spec.RenewTime != nil && !spec.RenewTime.After(lease.Spec.RenewTime.Time) {
		// Every renewal is a new record: one the API server found unchanged would
		// not be stored, and no one could tell it from the one before.
		spec.RenewTime = &metav1.MicroTime{Time: lease.Spec.RenewTime.Add(time.Microsecond)}
	}
	lease.Spec = spec
	for k, v := range l.labels {
		metav1.SetMetaDataLabel(&lease.ObjectMeta, k, v)
	}
	delete(lease.Annotations, ReleasedByAnnotation)
	if mine {
		metav1.SetMetaDataAnnotation(&lease.ObjectMeta, RetryPeriodAnnotation, l.lease.RetryPeriod.String())
	} else {
		l.tenure.End()
		if record.HolderIdentity == "" {
			metav1.SetMetaDataAnnotation(&lease.ObjectMeta, ReleasedByAnnotation, l.lease.Identity+" "+string(lease.UID))
		}
	}
	if mine && spec.RenewTime != nil {
		l.mu.Lock()
		l.sentRenewal = spec.RenewTime.Truncate(time.Microsecond)
		l.mu.Unlock()
	}
	sent := l.clock.Now()
	updated, err := l.client.CoordinationV1().Leases(l.lease.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	stored := updated.ResourceVersion != lease.ResourceVersion
	l.current = updated
	l.version, l.since, l.watched = updated.ResourceVersion, l.clock.Now(), true
	switch {
	case mine:
		l.wrote, l.previous = updated.ResourceVersion, l.lease.Identity
		if stored {
			l.tenure.Extend(sent, time.Duration(record.LeaseDurationSeconds)*time.Second)
		}
	case record.HolderIdentity == "":
		l.releasedAt = updated.ResourceVersion
	}
	return nil
}

// Release empties the Lease if this process holds it by its own write, marked as
// released by it, with a duration of one second, and tells whether it did. The tenure
// ends first. A Lease that names this process by someone else's edit is left alone:
// marking it released would hand it over at once, while its real holder may act.
//
// A renewal of this process whose answer was cut off, its context cancelled as the work
// stopped, may still commit between the read and the update here: the update then
// conflicts with this process's own write. It reads the Lease again and retries while
// the Lease names this process, so that the next holder need not wait for it to expire.
func (l *LeaseLock) Release(ctx context.Context) (bool, error) {
	l.tenure.End()
	l.mu.Lock()
	fresh := !l.createSent.IsZero() && l.clock.Now().Before(l.createSent.Add(l.createWait))
	l.mu.Unlock()
	if fresh {
		// A Lease this process created, or may have, is left to expire within the wait
		// its create began: a replica that saw it held here would take a release at
		// once and act beside the holder the wait is for.
		return false, nil
	}
	released := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		lease, err := l.client.CoordinationV1().Leases(l.lease.Namespace).Get(ctx, l.lease.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the lease: %w", err)
		}
		l.mu.Lock()
		l.current = lease
		own := l.ownLocked(lease)
		l.mu.Unlock()
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != l.lease.Identity || !own {
			return nil
		}
		now := metav1.NewTime(l.clock.Now())
		record := resourcelock.LeaseSpecToLeaderElectionRecord(&lease.Spec)
		err = l.Update(ctx, resourcelock.LeaderElectionRecord{
			LeaderTransitions:    record.LeaderTransitions,
			LeaseDurationSeconds: 1,
			AcquireTime:          now,
			RenewTime:            now,
		})
		released = err == nil
		return err
	})
	return released, err
}
