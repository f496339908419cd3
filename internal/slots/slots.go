// Package slots divides the hash space of the API server's sharded list and watch
// (KEP-5866: the 64-bit FNV-1a hash of object.metadata.uid) into a fixed number of
// equal slots, writes the shard selector of a set of slots, and assigns slots to
// replicas so that each holds an equal share and few slots move when a replica comes or
// goes. Membership and Holder run that assignment over Leases: who is live, and which
// slot's work runs here, each only while its Lease is held.
package slots

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
)

// Key is the field the slots hash: UIDs are random, so Foos spread evenly whatever
// their names and namespaces.
const Key = "object.metadata.uid"

// MaxSlots bounds the space: more slots balance finer but make longer selectors.
const MaxSlots = 1024

// Space is a number of equal slots over the 64-bit hash space.
type Space struct {
	n int
}

// NewSpace returns a space of n slots.
func NewSpace(n int) (Space, error) {
	if n < 1 || n > MaxSlots {
		return Space{}, fmt.Errorf("the number of slots must be between 1 and %d, not %d", MaxSlots, n)
	}
	return Space{n: n}, nil
}

// Len is the number of slots.
func (s Space) Len() int { return s.n }

// Hash is the hash the API server computes for a UID.
func Hash(uid types.UID) uint64 {
	h := fnv.New64a()
	h.Write([]byte(uid))
	return h.Sum64()
}

// Of is the slot of an object's UID: slot i holds the hashes h with
// floor(h*n / 2^64) = i.
func (s Space) Of(uid types.UID) int {
	hi, _ := bits.Mul64(Hash(uid), uint64(s.n))
	return int(hi)
}

// bound is the first hash of slot i, ceil(i * 2^64 / n), as the selector writes it:
// 0x and 16 hex digits, or 0x10000000000000000 for the end of the space.
func (s Space) bound(i int) string {
	if i == s.n {
		return "0x10000000000000000"
	}
	v := new(big.Int).Lsh(big.NewInt(int64(i)), 64)
	v.Add(v, big.NewInt(int64(s.n-1)))
	v.Div(v, big.NewInt(int64(s.n)))
	return fmt.Sprintf("0x%016x", v)
}

// Requirements are the hash ranges of the slots, adjacent slots merged into one range,
// in order.
func (s Space) Requirements(slots []int) ([]sharding.ShardRangeRequirement, error) {
	sorted := slices.Clone(slots)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	var reqs []sharding.ShardRangeRequirement
	for i := 0; i < len(sorted); {
		if sorted[i] < 0 || sorted[i] >= s.n {
			return nil, fmt.Errorf("slot %d is outside the %d slots", sorted[i], s.n)
		}
		j := i
		for j+1 < len(sorted) && sorted[j+1] == sorted[j]+1 {
			j++
		}
		reqs = append(reqs, sharding.ShardRangeRequirement{Key: Key, Start: s.bound(sorted[i]), End: s.bound(sorted[j] + 1)})
		i = j + 1
	}
	return reqs, nil
}

// Selector is the shard selector of the slots, for ListOptions.ShardSelector, and the
// same filter for the client side. No slots is an error: the empty selector would
// select everything.
func (s Space) Selector(slots []int) (string, sharding.Selector, error) {
	if len(slots) == 0 {
		return "", nil, errors.New("no slots: the empty shard selector selects every object")
	}
	reqs, err := s.Requirements(slots)
	if err != nil {
		return "", nil, err
	}
	sel := sharding.NewSelector(reqs...)
	return sel.String(), sel, nil
}

// Assign gives every slot to one member, as an index from slot to member: the member
// with the highest weight for the slot (rendezvous hashing) that has not reached its
// share yet, ceil(slots / members) (consistent hashing with bounded loads). Every
// replica that sees the same members computes the same assignment; when a member
// comes or goes, the slots that move are mostly those it gains or loses. No members
// assigns nothing.
func (s Space) Assign(members []string) []string {
	assigned := make([]string, s.n)
	if len(members) == 0 {
		return assigned
	}
	members = slices.Clone(members)
	slices.Sort(members)
	members = slices.Compact(members)
	limit := (s.n + len(members) - 1) / len(members)
	// The first n mod m members in weight order may take one slot more than the rest;
	// with the limit alone the last members could be left with fewer than their share.
	extra := s.n % len(members)
	if extra == 0 {
		extra = len(members)
	}
	load := make(map[string]int, len(members))
	full := 0
	for slot := range s.n {
		ranked := slices.Clone(members)
		slices.SortFunc(ranked, func(a, b string) int {
			wa, wb := weight(a, slot), weight(b, slot)
			switch {
			case wa > wb:
				return -1
			case wa < wb:
				return 1
			}
			return strings.Compare(a, b)
		})
		for _, m := range ranked {
			room := limit
			if full >= extra {
				room = s.n / len(members)
			}
			if load[m] < room {
				assigned[slot] = m
				load[m]++
				if load[m] == limit {
					full++
				}
				break
			}
		}
	}
	return assigned
}

// SlotsOf are the slots assigned to member, in order.
func SlotsOf(assigned []string, member string) []int {
	var slots []int
	for slot, m := range assigned {
		if m == member {
			slots = append(slots, slot)
		}
	}
	return slots
}

// weight is the rendezvous weight of a member for a slot.
func weight(member string, slot int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	h.Write([]byte{0})
	h.Write([]byte(strconv.Itoa(slot)))
	// FNV-1a of similar strings differs mostly in its low bits; a final mix spreads them.
	return mix(h.Sum64())
}

// mix is the finalizer of SplitMix64.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
