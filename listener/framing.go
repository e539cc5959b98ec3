package listener

import (
	"bytes"
	"net/http"
	"strconv"
)

// Limits of the framing reader. Past them net/http refuses the request itself (431 for a head
// over MaxHeaderBytes plus 4 KiB, an error for a chunk line of 4 KiB or a trailer larger than its
// 4 KiB buffer) and closes the connection; the reader stops there too.
const (
	maxHead      = 128 << 10
	maxChunkLine = 4096 + 2
	maxTrailer   = 8 << 10
)

// framingState is where in a request the next byte belongs.
type framingState int

const (
	inHead      framingState = iota // the request line and the header fields
	inBody                          // Content-Length bytes of body
	inChunkLine                     // a chunk's size line
	inChunkData                     // a chunk's data
	inChunkEnd                      // the CRLF after a chunk's data
	inTrailer                       // the trailer fields after the last chunk
)

// framing follows the HTTP/1.1 message framing (RFC 9112 sections 6 and 7) of the requests one
// connection carries, as net/http will read them, to find the requests that carry both
// Content-Length and Transfer-Encoding. net/http drops the Content-Length of such a request
// before any handler runs, so only the bytes show it.
//
// It is deliberately no more lenient than net/http: wherever net/http would refuse the bytes
// (a malformed head, an unsupported transfer coding, a bad chunk), framing stops following the
// connection, and the bytes after that request are never delivered (see guardConn.Read), so the
// two readers can never disagree on where a request starts.
type framing struct {
	state     framingState
	buf       []byte // the head, chunk line or trailer read so far
	remaining uint64 // body or chunk bytes still to come
	heads     int    // request heads completed on this connection
	// flagged is the number of the request (1 for the first) that carried both Content-Length
	// and Transfer-Encoding (or Transfer-Encoding in HTTP/1.0); 0: none.
	flagged int
	stopped bool // the framing is refused or not followed any more: deliver no more bytes
	// post is set while the request being read is a POST; skipCRLF counts the CR or LF bytes
	// net/http still skips before the next request line, as it does after a POST (RFC 9112
	// section 2.2: old clients send a CRLF after a POST body).
	post     bool
	skipCRLF int
}

// feed reads the next bytes of the connection and returns how many of them may be delivered to
// the HTTP server: all of them, or those up to the end of the request after which the
// connection must end (then stopped is set).
func (f *framing) feed(p []byte) int {
	for i := 0; i < len(p); {
		if f.stopped {
			return i
		}
		switch f.state {
		case inHead:
			if f.skipCRLF > 0 && len(f.buf) == 0 {
				if p[i] == '\r' || p[i] == '\n' {
					f.skipCRLF--
					i++
					continue
				}
				f.skipCRLF = 0
			}
			n, done := f.line(p[i:], maxHead, endOfHead)
			i += n
			if done {
				f.head()
			}
		case inBody, inChunkData:
			n := uint64(len(p) - i)
			if n > f.remaining {
				n = f.remaining
			}
			i += int(n)
			f.remaining -= n
			if f.remaining == 0 {
				if f.state == inBody {
					f.state = inHead
					f.ended()
				} else {
					f.state = inChunkEnd
				}
			}
		case inChunkEnd:
			n, done := f.line(p[i:], 2, func(b []byte) bool { return len(b) == 2 })
			i += n
			if done {
				if string(f.buf) != "\r\n" {
					f.stopped = true // net/http: "malformed chunked encoding"
				} else {
					f.state, f.buf = inChunkLine, f.buf[:0]
				}
			}
		case inChunkLine:
			n, done := f.line(p[i:], maxChunkLine, func(b []byte) bool { return b[len(b)-1] == '\n' })
			i += n
			if done {
				f.chunkLine()
			}
		case inTrailer:
			n, done := f.line(p[i:], maxTrailer, endOfTrailer)
			i += n
			if done {
				f.state, f.buf = inHead, f.buf[:0]
				f.ended()
			}
		}
	}
	return len(p)
}

// ended notes the end of a request: after a POST, net/http skips up to 4 CR or LF bytes (those
// among the next 4) before the next request line.
func (f *framing) ended() {
	if f.post {
		f.skipCRLF = 4
	}
}

// line appends bytes of p to buf until end says the element is complete, and returns how many
// bytes it took. Past limit bytes the framing stops.
func (f *framing) line(p []byte, limit int, end func([]byte) bool) (int, bool) {
	for i, b := range p {
		f.buf = append(f.buf, b)
		if end(f.buf) {
			return i + 1, true
		}
		if len(f.buf) >= limit {
			f.stopped = true
			return i + 1, false
		}
	}
	return len(p), false
}

// endOfHead reports whether head ends with the empty line closing the header fields (net/http
// accepts a bare LF for CRLF). A head that starts with an empty line is complete too: net/http
// refuses it.
func endOfHead(head []byte) bool {
	if head[len(head)-1] != '\n' {
		return false
	}
	return len(head) <= 2 && (string(head) == "\n" || string(head) == "\r\n") ||
		bytes.HasSuffix(head, []byte("\n\n")) || bytes.HasSuffix(head, []byte("\n\r\n"))
}

// endOfTrailer: after the last chunk comes CRLF alone, or trailer fields and an empty line.
func endOfTrailer(t []byte) bool { return endOfHead(t) }

// head decides the framing of the body from the request head in buf.
func (f *framing) head() {
	f.heads++
	head := f.buf
	f.buf = f.buf[:0]
	lines := bytes.Split(head, []byte("\n"))
	for i := range lines {
		lines[i] = bytes.TrimSuffix(lines[i], []byte("\r"))
	}
	method, rest, ok1 := bytes.Cut(lines[0], []byte(" "))
	f.post = string(method) == "POST"
	_, proto, ok2 := bytes.Cut(rest, []byte(" "))
	major, minor, ok := http.ParseHTTPVersion(string(proto))
	if !ok1 || !ok2 || !ok || major != 1 {
		f.stopped = true // net/http answers 400 or 505 and closes
		return
	}
	var cl, te [][]byte
	last := -1 // 0 for Content-Length, 1 for Transfer-Encoding: the field a folded line continues
	for i, line := range lines[1:] {
		if len(line) == 0 {
			break // the empty line ending the head
		}
		if line[0] == ' ' || line[0] == '\t' {
			if i == 0 {
				f.stopped = true // net/http: malformed MIME header initial line
				return
			}
			// An obsolete line folding continues the previous field; net/http joins the two
			// with a space.
			switch last {
			case 0:
				cl[len(cl)-1] = append(append(cl[len(cl)-1], ' '), trimOWS(line)...)
			case 1:
				te[len(te)-1] = append(append(te[len(te)-1], ' '), trimOWS(line)...)
			}
			continue
		}
		key, value, found := bytes.Cut(line, []byte(":"))
		if !found || !validFieldName(key) {
			f.stopped = true // net/http: malformed MIME header line
			return
		}
		last = -1
		switch {
		case bytes.EqualFold(key, []byte("Content-Length")):
			cl, last = append(cl, bytes.Clone(trimOWS(value))), 0
		case bytes.EqualFold(key, []byte("Transfer-Encoding")):
			te, last = append(te, bytes.Clone(trimOWS(value))), 1
		}
	}

	switch {
	case len(te) > 0 && (len(cl) > 0 || minor == 0):
		// RFC 9112 section 6.1: both fields (or Transfer-Encoding in HTTP/1.0) is how requests
		// are smuggled past a proxy that frames them otherwise. Refused, and the connection ends
		// with this request.
		f.flagged = f.heads
		f.stopped = true
	case len(te) > 0:
		if len(te) != 1 || !bytes.EqualFold(te[0], []byte("chunked")) {
			f.stopped = true // net/http answers 501 and closes
			return
		}
		f.state = inChunkLine
	case len(cl) > 0:
		for _, v := range cl[1:] {
			if !bytes.Equal(v, cl[0]) {
				f.stopped = true // net/http: multiple Content-Length headers
				return
			}
		}
		n, err := strconv.ParseUint(string(cl[0]), 10, 63)
		if err != nil {
			f.stopped = true // net/http: bad Content-Length
			return
		}
		if n > 0 {
			f.state, f.remaining = inBody, n
			return
		}
	}
	if f.state == inHead {
		f.ended() // no body
	}
}

// chunkLine reads a chunk's size line the way net/http does: CRLF-terminated, no other CR,
// optional whitespace and extensions after the hexadecimal size.
func (f *framing) chunkLine() {
	line := f.buf
	f.buf = f.buf[:0]
	if i := bytes.IndexByte(line, '\r'); i < 0 || i != len(line)-2 {
		f.stopped = true // net/http: bare LF, or a CR inside the line
		return
	}
	line = line[:len(line)-2]
	for len(line) > 0 && (line[len(line)-1] == ' ' || line[len(line)-1] == '\t') {
		line = line[:len(line)-1]
	}
	line, _, _ = bytes.Cut(line, []byte(";"))
	if len(line) == 0 || len(line) > 16 {
		f.stopped = true
		return
	}
	var n uint64
	for _, b := range line {
		switch {
		case '0' <= b && b <= '9':
			b -= '0'
		case 'a' <= b && b <= 'f':
			b -= 'a' - 10
		case 'A' <= b && b <= 'F':
			b -= 'A' - 10
		default:
			f.stopped = true // net/http: invalid byte in chunk length
			return
		}
		n = n<<4 | uint64(b)
	}
	if n == 0 {
		f.state = inTrailer
		return
	}
	f.state, f.remaining = inChunkData, n
}

func trimOWS(b []byte) []byte { return bytes.Trim(b, " \t") }

// validFieldName reports whether name is an RFC 9110 token, as net/http requires of a field name.
func validFieldName(name []byte) bool {
	if len(name) == 0 {
		return false
	}
	for _, c := range name {
		if c >= 0x80 || !isTokenByte[c] {
			return false
		}
	}
	return true
}

var isTokenByte = func() (t [128]bool) {
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c] = true
		t[c-'a'+'A'] = true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()
