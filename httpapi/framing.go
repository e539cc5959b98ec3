package httpapi

import (
	"encoding/json"
	"net/http"
)

// RefuseFraming answers a request the listener refused for its framing before any route saw it
// (listener.Options.Refuse): one with both Content-Length and Transfer-Encoding, which RFC 9112
// section 6.1 says may be an attempt to smuggle a second request past a proxy. It is a 400
// invalid-request like any other, and the listener closes the connection after it.
func RefuseFraming(w http.ResponseWriter, _ *http.Request) {
	p := invalid("the request has both Content-Length and Transfer-Encoding (or Transfer-Encoding in HTTP/1.0); " +
		"send one of them. The connection is closed and nothing sent after this request on it was read")
	body, err := json.Marshal(p)
	if err != nil {
		http.Error(w, p.Detail, p.Status)
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(p.Status)
	w.Write(body)
}
