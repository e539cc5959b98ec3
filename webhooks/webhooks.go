// Package webhooks pushes payrouter's events to the storefront's endpoints as Standard Webhooks
// (docs/webhooks.md): every event of the feed (payrouter.EventStore), delivered at least once to
// each endpoint that subscribed to its type, signed with the endpoint's whsec_ secrets, with the
// event's evt_ id as webhook-id.
//
// Each endpoint is a Target: its own HTTP client and connections, a bulkhead of max_concurrent
// slots that a delivery takes without waiting, a timeout, no redirects followed, and a dialer
// that refuses non-public addresses after DNS unless allow_private. A slow endpoint holds only
// its own slots; the queue worker never waits on it.
package webhooks
