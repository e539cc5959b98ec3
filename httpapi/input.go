package httpapi

import (
	"fmt"
	"net/url"
	"regexp"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter/cardnum"
)

// What payrouter accepts of the strings a caller writes outside the body (docs/input.md). The
// body's own rules are in decode.go; all of them refuse a card number (package cardnum).

// maxPathID is the longest id a path may name: payrouter's ids are 29 characters (ch_ or re_
// and 26 of base32), and a longer one names nothing.
const maxPathID = 64

// pathIDPattern is what an id in a path may be made of: payrouter's ids, and nothing that could
// carry text into a problem's detail or a log line.
var pathIDPattern = regexp.MustCompile(fmt.Sprintf(`^[A-Za-z0-9_.:-]{1,%d}$`, maxPathID))

// validPathID reports whether id may be looked up: see pathIDPattern, and no card number (its
// characters are never percent-escaped).
func validPathID(id string) bool {
	return pathIDPattern.MatchString(id) && !cardnum.Contains(id)
}

// screenPathID refuses a request whose path id (the :id of /charge/:id and /refund/:id) is no
// possible id, 400 invalid-request naming the field "id" and never repeating it: a card number,
// more than 64 characters, or characters outside A-Z a-z 0-9 _ . : -. Such an id is never
// looked up, logged, traced or echoed.
func (s *server) screenPathID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		for _, pv := range c.PathValues() {
			if pv.Name != "id" {
				continue
			}
			id := pv.Value
			// echo gives the id as the path wrote it, percent-escapes included.
			unescaped, err := url.PathUnescape(id)
			switch {
			case cardnum.Contains(id) || err == nil && cardnum.Contains(unescaped):
				return writeProblem(c, invalid("the id in the path looks like a card number; payrouter's ids start with ch_ or re_",
					fieldError{Field: "id", Message: cardNumberRefusal}))
			case !pathIDPattern.MatchString(id):
				return writeProblem(c, invalid("the id in the path is not one payrouter makes",
					fieldError{Field: "id", Message: fmt.Sprintf("must be 1 to %d of A-Z a-z 0-9 _ . : -", maxPathID)}))
			}
		}
		return next(c)
	}
}

// maxEcho is the longest caller-supplied name a problem's detail repeats.
const maxEcho = 64

// echoable is name as a problem's detail may repeat it: itself when short, printable ASCII and
// no card number, else a placeholder.
func echoable(name string) string {
	ok := len(name) <= maxEcho && !cardnum.Contains(name)
	for i := 0; ok && i < len(name); i++ {
		ok = name[i] > 0x20 && name[i] < 0x7f
	}
	if !ok {
		return "(the name given)"
	}
	return name
}
