package memstore

import (
	"container/list"
	"slices"
	"unsafe"

	"github.com/payrouter/payrouter"
)

// What the store holds is counted in bytes, per owner (the API key scope a charge or an
// idempotency key belongs to), so that each key's share of state.max_memory bounds what that
// key makes the process hold (docs/limits.md, Memory). Each thing held is counted at what the Go
// heap gives it: a fixed overhead for its structs and the slots of the maps, lists and heaps
// that index it, plus each variable-length field (a string, the metadata map, the attempts, a
// record's body) at the size the allocator rounds it up to. The counts are what the store's
// data structures hold, not guesses of averages: TestMeasuredBytes fills a store and compares
// the runtime's own heap figures with them, and fails if the store holds more than it counts.

// sizeClasses are the Go allocator's size classes up to 32 KiB (the runtime's sizeclasses.go):
// an allocation of n bytes takes the first class of at least n. Larger ones take whole 8 KiB
// pages. Should the runtime change them, TestMeasuredBytes says so.
var sizeClasses = [...]int64{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208,
	224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152,
	1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528,
	6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480,
	21760, 24576, 27264, 28672, 32768}

// alloc is what the heap gives an allocation of n bytes.
func alloc(n int) int64 {
	if n <= 0 {
		return 0
	}
	m := int64(n)
	if m > sizeClasses[len(sizeClasses)-1] {
		return (m + 8191) &^ 8191
	}
	i, _ := slices.BinarySearch(sizeClasses[:], m)
	return sizeClasses[i]
}

// str is what a string's bytes take (its header is in the struct holding it).
func str(s string) int64 { return alloc(len(s)) }

// slot is what one entry of a large map of key size k and value size v takes. Go's maps keep
// groups of 8 slots, each with a control byte, at most 7/8 full, and double when they fill:
// just after doubling a map holds 16/7 slots per entry, which is what an entry is counted at.
func slot(k, v uintptr) int64 { return (int64(k+v+1)*16 + 6) / 7 }

// Sizes of the structs held, as this build lays them out.
var (
	chargeStruct  = alloc(int(unsafe.Sizeof(payrouter.Charge{})))
	attemptStruct = int(unsafe.Sizeof(payrouter.Attempt{}))
	refundStruct  = alloc(int(unsafe.Sizeof(payrouter.Refund{})))
	recordStruct  = alloc(int(unsafe.Sizeof(payrouter.IdempotencyRecord{})))
	eventStruct   = alloc(int(unsafe.Sizeof(storedEvent{})))
	entryStruct   = alloc(int(unsafe.Sizeof(chargeEntry{})))
	elementStruct = alloc(int(unsafe.Sizeof(list.Element{})))

	stringHeader = unsafe.Sizeof("")
	pointer      = unsafe.Sizeof(uintptr(0))
	expirySlot   = int64(unsafe.Sizeof(expiry{}))
)

// chargeFixedBytes is what every charge costs whatever it holds: its entry (the bookkeeping of
// bounds and quotas) with its element in a settled order, and its slots in the maps of charges,
// entries, statuses, its events and its refunds.
var chargeFixedBytes = entryStruct + elementStruct +
	slot(stringHeader, pointer) + // charges
	slot(stringHeader, pointer) + // entries
	slot(stringHeader, 0) + // byStatus
	slot(stringHeader, unsafe.Sizeof([]*storedEvent{})) + // eventsOf
	slot(stringHeader, unsafe.Sizeof([]string{})) // refundsOf

// mapBytes is what a small map[string]string holding m takes, its strings included (the
// metadata, a record's header): its header and the groups of 8 slots a map of len(m) entries
// has, at most 7/8 full and at least one group, whether it grew entry by entry or was made
// with its size.
func mapBytes(m map[string]string) int64 {
	if m == nil {
		return 0
	}
	const header, tables = 48, 56 // the map's header; a directory and its table, past one group
	n := int64(header)
	if len(m) > 0 {
		slots := 8
		for len(m) > slots*7/8 && slots > 8 || len(m) > slots {
			slots *= 2
		}
		n += alloc(slots / 8 * (8 + 8*int(2*stringHeader)))
		if slots > 8 {
			n += tables
		}
	}
	for k, v := range m {
		n += str(k) + str(v)
	}
	return n
}

// bodyBytes is what the charge's body takes: its metadata, description and customer id, which
// every version of the charge shares (putCharge keeps one copy of them per charge).
func bodyBytes(c *payrouter.Charge) int64 {
	return mapBytes(c.Metadata) + str(c.Description) + str(c.CustomerID)
}

// versionBytes is what one stored version v of charge e takes beyond the body e shares: the
// struct, its own strings and its attempts (each version holds its own copy of the attempts'
// array), and a body of its own when it does not share e's.
func versionBytes(v *payrouter.Charge, e *chargeEntry) int64 {
	n := chargeStruct + str(v.ID) + str(v.Currency) + str(v.Country) + str(v.PinnedGateway) +
		str(v.Route) + str(v.Owner) + str(v.Gateway) + str(v.GatewayReference) + str(v.Reference) +
		str(v.DeclineCode) + str(string(v.Changing))
	n += alloc(cap(v.Attempts) * attemptStruct)
	for _, a := range v.Attempts {
		n += str(a.Reference)
	}
	if !e.shares(v) {
		n += bodyBytes(v)
	}
	return n
}

// eventBytes is what one event takes: its struct and id, its slot in the map of events by id
// and in its charge's and its owner's lists (each counted at twice a pointer, for the spare
// capacity of a growing slice), and, for a refund's event, its copy of the refund.
func eventBytes(ev *payrouter.Event) int64 {
	n := eventStruct + str(ev.ID) + slot(stringHeader, pointer) + 4*int64(pointer)
	if ev.Refund != nil {
		n += refundStruct
	}
	return n
}

// refundBytes is what a stored refund takes: its struct, its strings, and its slots in the map of
// refunds and its charge's list.
func refundBytes(r *payrouter.Refund) int64 {
	return refundStruct + str(r.ID) + str(r.ChargeID) + str(r.Currency) + str(r.Gateway) +
		str(r.Owner) + str(r.Reference) + str(r.GatewayReference) + str(r.Detail) +
		slot(stringHeader, pointer) + 2*int64(stringHeader)
}

// idemBytes is what idempotency key key with entry e takes: its strings, its slot in the map of
// keys, room for the expiries it leaves in the heap (the live one, a stale one from a renewal
// or a completion, and the heap's spare capacity), and its record with the record's header and
// body. A record answered from its charge leaves one more expiry, in the heap of keyed charges.
func idemBytes(key string, e *idemEntry) int64 {
	n := str(key) + str(e.fingerprint) + str(e.owner) + slot(stringHeader, unsafe.Sizeof(idemEntry{})) + 4*expirySlot
	if r := e.rec; r != nil {
		n += recordStruct + mapBytes(r.Header) + alloc(len(r.Body)) + str(r.ChargeID)
		if r.Fingerprint != e.fingerprint {
			n += str(r.Fingerprint) // else the entry's own string, counted above
		}
		if r.ChargeID != "" {
			n += 2 * expirySlot
		}
	}
	return n
}
