package listener

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/textproto"
	"strings"
	"testing"

	"golang.org/x/net/http/httpguts"
)

// run feeds stream to a framing byte by byte and returns how many bytes it delivered, the
// request it flagged and the offsets where each request it followed ended.
func run(stream []byte) (delivered, flagged int, ends []int) {
	var f framing
	for i := range stream {
		before, heads := f.state, f.heads
		n := f.feed(stream[i : i+1])
		delivered += n
		if n == 0 {
			break
		}
		if f.state == inHead && len(f.buf) == 0 && !f.stopped && (before != inHead || f.heads > heads) {
			ends = append(ends, delivered)
		}
	}
	return delivered, f.flagged, ends
}

// runPieces feeds stream in pieces of size step, as reads from a connection would.
func runPieces(stream []byte, step int) (delivered, flagged int) {
	var f framing
	for i := 0; i < len(stream); i += step {
		n := f.feed(stream[i:min(i+step, len(stream))])
		delivered += n
		if f.stopped {
			break
		}
	}
	return delivered, f.flagged
}

func TestFraming(t *testing.T) {
	const get = "GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
	tests := []struct {
		name    string
		stream  string
		flagged int // the request refused, 0 none
		// through is where the bytes reaching net/http end: after the first occurrence of it in
		// stream; "": all of the stream.
		through string
	}{
		{"two gets", get + get, 0, ""},
		{"content-length body then a get", "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello" + get, 0, ""},
		{"chunked body then a get", "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\n" + get, 0, ""},
		{"chunked body with trailers", "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nh\r\n0\r\nX-Sum: 1\r\n\r\n" + get, 0, ""},
		{"a body that looks like a head", "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 48\r\n\r\nGET / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-En\r\n" + get, 0, ""},
		{"content-length then transfer-encoding", "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get, 1, "\r\n\r\n"},
		{"transfer-encoding then content-length", "POST /c HTTP/1.1\r\nHost: x\r\ntransfer-encoding: Chunked\r\ncontent-length: 0\r\n\r\n0\r\n\r\n" + get, 1, "\r\n\r\n"},
		{"flagged second request", get + "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + get, 2, "chunked\r\n\r\n"},
		{"transfer-encoding in HTTP/1.0", "POST /c HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 1, "\r\n\r\n"},
		{"bare LF heads", "GET / HTTP/1.1\nHost: x\nContent-Length: 1\nTransfer-Encoding: chunked\n\n0\r\n\r\n", 1, "\n\n"},
		{"folded transfer-encoding", "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 1, "\r\n\r\n"},
		// Bytes net/http refuses end the connection after them: nothing later is delivered.
		{"two transfer codings", "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + get, 0, "\r\n\r\n"},
		{"differing content-lengths", "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab" + get, 0, "\r\n\r\n"},
		{"bare LF in a chunk line", "POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1\nx\r\n0\r\n\r\n" + get, 0, "\r\n\r\n1\n"},
		{"space before the colon", "GET / HTTP/1.1\r\nHost: x\r\nContent-Length : 1\r\nTransfer-Encoding: chunked\r\n\r\n" + get, 0, "\r\n\r\n"},
		{"CRLF after a POST body is skipped", "POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx\r\n" + get, 0, ""},
		{"but not after a GET", get + "\r\n" + get, 0, get + "\r\n"},
		{"not HTTP/1", "GET / HTTP/2.0\r\n\r\n" + get, 0, "\r\n\r\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := len(tc.stream)
			if tc.through != "" {
				want = strings.Index(tc.stream, tc.through) + len(tc.through)
			}
			if delivered, flagged, _ := run([]byte(tc.stream)); delivered != want || flagged != tc.flagged {
				t.Errorf("byte by byte: delivered %d of %d bytes, flagged request %d; want %d, %d",
					delivered, len(tc.stream), flagged, want, tc.flagged)
			}
			for _, step := range []int{3, 17, 4096} {
				if delivered, flagged := runPieces([]byte(tc.stream), step); delivered != want || flagged != tc.flagged {
					t.Errorf("in pieces of %d: delivered %d of %d bytes, flagged request %d; want %d, %d",
						step, delivered, len(tc.stream), flagged, want, tc.flagged)
				}
			}
		})
	}
}

// FuzzFraming compares framing with net/http's own reading of the same bytes: wherever
// net/http reads a request through, framing ends it at the same byte or has stopped the
// connection before; framing stops the connection only where net/http refuses the bytes or
// the request carries both Content-Length and Transfer-Encoding; and it flags every request
// whose head has both.
func FuzzFraming(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nA: b\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n",
		"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\nContent-Length: 0\r\n\r\n",
		"GET / HTTP/1.1\nX: a\n b\nContent-Length: 1\n\nxGET / HTTP/1.1\n\n",
	} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, stream []byte, step uint8) {
		delivered, flagged, ends := run(stream)
		if d, fl := runPieces(stream, int(step)+1); d != delivered || fl != flagged {
			t.Fatalf("in pieces of %d: delivered %d, flagged %d; byte by byte: %d, %d", int(step)+1, d, fl, delivered, flagged)
		}

		// net/http's reading of the whole stream, request by request.
		src := bytes.NewReader(stream)
		br := bufio.NewReader(src)
		start, lastMethod := 0, ""
		for k := 1; ; k++ {
			if lastMethod == "POST" { // as http.Server does
				peek, _ := br.Peek(4)
				n := 0
				for n < len(peek) && (peek[n] == '\r' || peek[n] == '\n') {
					n++
				}
				br.Discard(n)
				start += n
			}
			req, err := http.ReadRequest(br)
			if err != nil || !serverAccepts(req) {
				return
			}
			lastMethod = req.Method
			_, err = io.Copy(io.Discard, req.Body)
			if err != nil {
				return
			}
			end := len(stream) - src.Len() - br.Buffered()
			cl, te := rawFraming(stream[start:end])
			mustFlag := te && (cl || req.ProtoMinor == 0)
			if k > len(ends) {
				// framing stopped within this request: only a flagged one may stop it there.
				if !mustFlag || flagged != k {
					t.Fatalf("request %d (bytes %d to %d) is read through by net/http; framing stopped at byte %d, flagging request %d",
						k, start, end, delivered, flagged)
				}
				return
			}
			if mustFlag {
				t.Fatalf("request %d has Content-Length %v, Transfer-Encoding %v, HTTP/1.%d; framing did not flag it", k, cl, te, req.ProtoMinor)
			}
			if ends[k-1] != end {
				t.Fatalf("request %d: net/http ends it at byte %d, framing at byte %d", k, end, ends[k-1])
			}
			start = end
		}
	})
}

// rawFraming reports whether a request's head has the Content-Length and Transfer-Encoding
// fields, as net/textproto reads them (net/http deletes them once read).
func rawFraming(request []byte) (cl, te bool) {
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(request)))
	if _, err := tp.ReadLine(); err != nil {
		return false, false
	}
	h, _ := tp.ReadMIMEHeader()
	_, cl = h["Content-Length"]
	_, te = h["Transfer-Encoding"]
	return cl, te
}

// serverAccepts reports whether http.Server goes on with a request http.ReadRequest read: it
// answers 505 to versions other than 1.x, and 400 to a field name or value net/textproto lets
// through but HTTP does not allow, and closes the connection.
func serverAccepts(req *http.Request) bool {
	if req.ProtoMajor != 1 {
		return false
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return false
			}
		}
	}
	return true
}
