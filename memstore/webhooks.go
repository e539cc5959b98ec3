package memstore

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/payrouter/payrouter"
)

// MaxDeadLetters is how many dead letters the store keeps; beyond it the oldest go. Memory is
// one instance's and lost on restart anyway: a fleet keeps them in PostgreSQL.
const MaxDeadLetters = 10_000

// webhookState is what the storefront webhooks keep here (payrouter.WebhookStore): each
// endpoint's cursor, a position in the store's one event sequence (guarded by chargeMu, as the
// events are), and the dead letters and disabled endpoints (guarded by queueMu, as the tasks
// they come from are).
type webhookState struct {
	cursors  map[string]int64
	dead     []payrouter.DeadLetter // oldest first
	disabled map[string]payrouter.WebhookDisabled
}

func (s *Store) webhooks() *webhookState { return &s.hooks }

// position renders a cursor; parsePosition reads it back.
func position(seq int64) string { return strconv.FormatInt(seq, 10) }

func parsePosition(p string) (int64, error) {
	n, err := strconv.ParseInt(p, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("memstore: %q is not a position of this store's event feed", p)
	}
	return n, nil
}

// WebhookEvents returns up to limit of owner's events after endpoint's cursor
// (payrouter.WebhookStore); an endpoint without one gets one at the newest event.
func (s *Store) WebhookEvents(ctx context.Context, endpoint, owner string, limit int) (payrouter.EventPage, error) {
	if err := s.usable(ctx); err != nil {
		return payrouter.EventPage{}, err
	}
	h := s.webhooks()
	s.chargeMu.RLock()
	cur, ok := h.cursors[endpoint]
	s.chargeMu.RUnlock()
	if !ok {
		// The first read of an endpoint sets its cursor, under the write lock, unless another
		// read set it meanwhile.
		s.chargeMu.Lock()
		if _, ok := h.cursors[endpoint]; !ok {
			h.cursors[endpoint] = s.eventSeq
		}
		s.chargeMu.Unlock()
	}
	// Charges are written under the write lock: a poll reading the feed every second never
	// holds one back for longer than this read.
	s.chargeMu.RLock()
	defer s.chargeMu.RUnlock()
	cur = h.cursors[endpoint]
	page := payrouter.EventPage{From: position(cur), To: position(cur)}
	oe := s.events[owner]
	if oe == nil || limit <= 0 {
		return page, nil
	}
	start := sort.Search(len(oe.list), func(i int) bool { return oe.list[i].seq > cur })
	for _, e := range oe.list[start:] {
		if e.gone {
			continue
		}
		if len(page.Events) == limit {
			page.More = true
			break
		}
		ev := e.ev
		if ev.Charge != nil {
			ev.Charge = cloneCharge(ev.Charge)
		}
		if ev.Refund != nil {
			cp := *ev.Refund
			ev.Refund = &cp
		}
		page.Events = append(page.Events, ev)
		page.To = position(e.seq)
	}
	return page, nil
}

// AdvanceWebhook moves endpoint's cursor from from to to and queues tasks, under the store's
// locks (payrouter.WebhookStore): payrouter.ErrStale when the cursor moved meanwhile.
func (s *Store) AdvanceWebhook(ctx context.Context, endpoint, from, to string, tasks []payrouter.Task) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	f, err := parsePosition(from)
	if err != nil {
		return err
	}
	t, err := parsePosition(to)
	if err != nil {
		return err
	}
	s.chargeMu.Lock()
	defer s.chargeMu.Unlock()
	h := s.webhooks()
	if cur, ok := h.cursors[endpoint]; !ok || cur != f {
		return fmt.Errorf("memstore: webhook cursor of %s is not at %s: %w", endpoint, from, payrouter.ErrStale)
	}
	s.queueMu.Lock()
	for _, task := range tasks {
		s.enqueue(task)
	}
	s.queueMu.Unlock()
	h.cursors[endpoint] = t
	return nil
}

// RequeueTask replaces the queued task id by t (payrouter.WebhookStore).
func (s *Store) RequeueTask(ctx context.Context, id string, t *payrouter.Task) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	if !s.dequeue(id) {
		return fmt.Errorf("memstore: task %s is not queued: %w", id, payrouter.ErrNotFound)
	}
	t.ID = s.enqueue(*t)
	return nil
}

// dequeue removes the task id from the queue and reports whether it was there; queueMu must be
// held.
func (s *Store) dequeue(id string) bool {
	i := slices.IndexFunc(s.queue, func(q *queued) bool { return q.task.ID == id })
	if i < 0 {
		return false
	}
	s.unpin(s.queue[i].task.ChargeID)
	s.queue = slices.Delete(s.queue, i, i+1)
	return true
}

// DeadLetterTask removes the queued task id and keeps dl (payrouter.WebhookStore).
func (s *Store) DeadLetterTask(ctx context.Context, id string, dl payrouter.DeadLetter) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	if dl.Task.Webhook == nil {
		return fmt.Errorf("memstore: dead letter of task %s: no webhook delivery", id)
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	if !s.dequeue(id) {
		return fmt.Errorf("memstore: task %s is not queued: %w", id, payrouter.ErrNotFound)
	}
	h := s.webhooks()
	h.dead = slices.DeleteFunc(h.dead, func(d payrouter.DeadLetter) bool { return d.Task.Webhook.ID == dl.Task.Webhook.ID })
	dl.Task = cloneTask(dl.Task)
	dl.Task.ID = ""
	h.dead = append(h.dead, dl)
	if over := len(h.dead) - MaxDeadLetters; over > 0 {
		h.dead = slices.Delete(h.dead, 0, over)
	}
	return nil
}

// DeadLetters returns up to limit dead letters, the newest first (payrouter.WebhookStore).
func (s *Store) DeadLetters(ctx context.Context, limit int) ([]payrouter.DeadLetter, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	h := s.webhooks()
	var out []payrouter.DeadLetter
	for i := len(h.dead) - 1; i >= 0 && len(out) < limit; i-- {
		d := h.dead[i]
		d.Task = cloneTask(d.Task)
		out = append(out, d)
	}
	return out, nil
}

// DeadLetterOf returns the dead letter of delivery (payrouter.WebhookStore).
func (s *Store) DeadLetterOf(ctx context.Context, delivery string) (*payrouter.DeadLetter, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	for _, d := range s.webhooks().dead {
		if d.Task.Webhook.ID == delivery {
			d.Task = cloneTask(d.Task)
			return &d, nil
		}
	}
	return nil, fmt.Errorf("memstore: dead letter %q: %w", delivery, payrouter.ErrNotFound)
}

// Redeliver removes the dead letter of delivery and queues t (payrouter.WebhookStore).
func (s *Store) Redeliver(ctx context.Context, delivery string, t *payrouter.Task) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	h := s.webhooks()
	i := slices.IndexFunc(h.dead, func(d payrouter.DeadLetter) bool { return d.Task.Webhook.ID == delivery })
	if i < 0 {
		return fmt.Errorf("memstore: dead letter %q: %w", delivery, payrouter.ErrNotFound)
	}
	h.dead = slices.Delete(h.dead, i, i+1)
	t.ID = s.enqueue(*t)
	return nil
}

// WebhookBacklog counts the webhook deliveries queued and the dead letters.
func (s *Store) WebhookBacklog(ctx context.Context) (queued, dead int64, err error) {
	if err := s.usable(ctx); err != nil {
		return 0, 0, err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	for _, q := range s.queue {
		if q.task.Kind == payrouter.TaskWebhook {
			queued++
		}
	}
	return queued, int64(len(s.webhooks().dead)), nil
}

// SetWebhookDisabled disables endpoint, or enables it again with nil (payrouter.WebhookStore).
func (s *Store) SetWebhookDisabled(ctx context.Context, endpoint string, d *payrouter.WebhookDisabled) error {
	if err := s.usable(ctx); err != nil {
		return err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	if d == nil {
		delete(s.webhooks().disabled, endpoint)
	} else {
		s.webhooks().disabled[endpoint] = *d
	}
	return nil
}

// WebhooksDisabled returns the disabled endpoints (payrouter.WebhookStore).
func (s *Store) WebhooksDisabled(ctx context.Context) (map[string]payrouter.WebhookDisabled, error) {
	if err := s.usable(ctx); err != nil {
		return nil, err
	}
	s.queueMu.Lock()
	defer s.queueMu.Unlock()
	out := make(map[string]payrouter.WebhookDisabled, len(s.webhooks().disabled))
	for k, v := range s.webhooks().disabled {
		out[k] = v
	}
	return out, nil
}

// cloneTask copies t deep enough that neither copy changes the other (its delivery and body).
func cloneTask(t payrouter.Task) payrouter.Task {
	if t.Webhook != nil {
		w := *t.Webhook
		w.Body = slices.Clone(w.Body)
		t.Webhook = &w
	}
	return t
}
