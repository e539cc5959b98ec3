package telemetry

import (
	"time"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/fallback"
)

// TaskQueue is the queue label of payrouter_queue_depth: the one durable queue of money work.
const TaskQueue = "tasks"

// QueueDepth sets payrouter_queue_depth for the task queue.
func (m *Metrics) QueueDepth(n int64) {
	m.queueDepth.WithLabelValues(TaskQueue).Set(float64(n))
}

// RouterObserver feeds the router's decisions (routing.Observer) into the metrics.
type RouterObserver struct{ m *Metrics }

// RouterObserver returns the routing.Observer that reports to m.
func (m *Metrics) RouterObserver() RouterObserver { return RouterObserver{m} }

// FallbackUsed counts an operation answered by its fallback.
func (o RouterObserver) FallbackUsed(op payrouter.Operation, p fallback.Policy) {
	o.m.FallbackUsed(op, string(p))
}

// HedgeDone counts a hedge result (won_primary, won_hedge, voided).
func (o RouterObserver) HedgeDone(result string) { o.m.hedges.WithLabelValues(result).Inc() }

// TaskNotQueued counts a task of money work that could not be queued.
func (o RouterObserver) TaskNotQueued(kind payrouter.TaskKind) {
	o.m.tasksNotQueued.WithLabelValues(string(kind)).Inc()
}

// ChargeReconciled observes how long a processing charge took to become final.
func (o RouterObserver) ChargeReconciled(status payrouter.ChargeStatus, took time.Duration) {
	o.m.reconciled.WithLabelValues(string(status)).Observe(took.Seconds())
}
