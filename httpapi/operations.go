package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/payrouter/payrouter"
	"github.com/payrouter/payrouter/payments"
)

// The operations on an answered charge (capture, void, refund) and the refund look-up.

// refundView is the refund object of docs/api.md.
type refundView struct {
	ID       string                 `json:"id"`
	ChargeID string                 `json:"charge_id"`
	Amount   int64                  `json:"amount"`
	Currency string                 `json:"currency"`
	Status   payrouter.RefundStatus `json:"status"`
	// FailureReason says why a failed refund was refused; never card data.
	FailureReason string `json:"failure_reason,omitempty"`
	CreatedAt     string `json:"created_at"`
}

func refundViewOf(rf *payrouter.Refund) refundView {
	v := refundView{
		ID: rf.ID, ChargeID: rf.ChargeID, Amount: rf.Amount, Currency: rf.Currency, Status: rf.Status,
		CreatedAt: rf.CreatedAt.UTC().Format(time.RFC3339),
	}
	if rf.Status == payrouter.RefundFailed {
		v.FailureReason = rf.Detail
	}
	return v
}

// readOptionalJSONBody reads a body that may be left out: an empty one needs no Content-Type
// (POST /charge/{id}/capture with no body at all is the usual call); any other must be
// application/json and at most 64 KiB. It returns nil for an empty body.
func readOptionalJSONBody(c *echo.Context) ([]byte, *problem) {
	body, err := io.ReadAll(io.LimitReader(c.Request().Body, MaxBodyBytes+1))
	if err != nil {
		p := invalid("the body could not be read")
		return nil, &p
	}
	if len(body) > MaxBodyBytes {
		p := newProblem(codePayloadTooLarge, "the body is larger than 64 KiB")
		return nil, &p
	}
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, nil
	}
	if !jsonMediaType(c.Request().Header.Get(echo.HeaderContentType)) {
		p := newProblem(codeUnsupportedMedia, "send the body as Content-Type: application/json, or send none")
		return nil, &p
	}
	return body, nil
}

// decodeOperation decodes the body of a capture, void (no members: an empty body or {}) or refund
// (withAmount: an optional "amount", 1 to 10^12 minor units; 0 returned when left out) as
// strictly as a charge: one JSON object, known members, exact types, no duplicates, nothing after
// it. The field errors never repeat a value.
func decodeOperation(body []byte, withAmount bool) (amount int64, errs []fieldError, err error) {
	if body == nil {
		return 0, nil, nil
	}
	v, err := parseJSON(body)
	if err != nil {
		var dup *duplicateKeyError
		if errors.As(err, &dup) {
			return 0, []fieldError{{Field: safeName(dup.key), Message: "is given twice"}}, err
		}
		return 0, []fieldError{{Field: "(body)", Message: err.Error()}}, err
	}
	if field := findCardNumber(v, ""); field != "" {
		return 0, []fieldError{{Field: field, Message: cardNumberRefusal}}, errors.New("card number")
	}
	obj, ok := v.(*jsonObject)
	if !ok {
		return 0, []fieldError{{Field: "(body)", Message: "must be a JSON object"}}, errDecode
	}
	f := fields{obj: obj, errs: &errs}
	if !withAmount {
		f.known()
	} else {
		f.known("amount")
		if a, ok := f.get("amount"); ok {
			n, isNum := a.(json.Number)
			i, perr := strconv.ParseInt(string(n), 10, 64)
			switch {
			case !isNum:
				f.fail("amount", "must be an integer number of minor units")
			case perr != nil:
				f.fail("amount", "must be an integer number of minor units, from 1 to 10^12")
			case i < 1 || i > maxAmount:
				f.fail("amount", "must be from 1 to 10^12 minor units")
			default:
				amount = i
			}
		}
	}
	if len(errs) > 0 {
		return 0, errs, errors.New("invalid body")
	}
	return amount, nil, nil
}

// operationRequest checks what every operation on a charge needs before anything happens: its
// body, its Idempotency-Key. It returns the amount asked for (refunds) or the problem to answer.
func operationRequest(c *echo.Context, withAmount bool) (key string, amount int64, p *problem) {
	body, p := readOptionalJSONBody(c)
	if p != nil {
		return "", 0, p
	}
	key, p = idempotencyKey(c)
	if p != nil {
		return "", 0, p
	}
	amount, errs, err := decodeOperation(body, withAmount)
	if err != nil {
		pr := invalid("the request is not valid; see errors", errs...)
		return "", 0, &pr
	}
	return key, amount, nil
}

// captureCharge is POST /charge/{id}/capture.
func (s *server) captureCharge(c *echo.Context) error {
	return s.changeAuthorization(c, "capture", s.Payments.CaptureCharge)
}

// voidCharge is POST /charge/{id}/void.
func (s *server) voidCharge(c *echo.Context) error {
	return s.changeAuthorization(c, "void", s.Payments.VoidCharge)
}

// changeAuthorization runs capture or void under the request's Idempotency-Key and answers 200
// with the charge.
func (s *server) changeAuthorization(c *echo.Context, op string, run func(context.Context, payments.Request, string, payments.Render) (payments.Answer, error)) error {
	key, _, p := operationRequest(c, false)
	if p != nil {
		return writeProblem(c, *p)
	}
	id := c.Param("id")
	a, err := run(c.Request().Context(), request(c, key, fingerprint("POST /charge/"+id+"/"+op, struct{}{})), id,
		func(r payments.Result) (payments.Answer, error) {
			if r.Err != nil {
				return s.errorAnswer(c, op+".failed", r.Err)
			}
			return jsonAnswer(http.StatusOK, echo.MIMEApplicationJSON, viewOf(r.Charge))
		})
	return s.send(c, op+".failed", a, err)
}

// refundCharge is POST /charge/{id}/refund: 201 with the refund when the gateway applied it, 202
// when it is queued to be sent later.
func (s *server) refundCharge(c *echo.Context) error {
	key, amount, p := operationRequest(c, true)
	if p != nil {
		return writeProblem(c, *p)
	}
	id := c.Param("id")
	in := struct {
		Amount int64 `json:"amount,omitempty"`
	}{amount}
	refundID := refundIDFor(scopeOf(c), key)
	c.Set("refund_id", refundID)
	a, err := s.Payments.RefundCharge(c.Request().Context(), request(c, key, fingerprint("POST /charge/"+id+"/refund", in)), id, refundID, amount,
		func(r payments.Result) (payments.Answer, error) {
			if r.Err != nil {
				return s.errorAnswer(c, "refund.failed", r.Err)
			}
			return refundAnswer(r.Refund)
		})
	return s.send(c, "refund.failed", a, err)
}

// refundAnswer is 201 with a refund the gateway applied, else 202 with where to look it up.
func refundAnswer(rf *payrouter.Refund) (payments.Answer, error) {
	if rf.Status == payrouter.RefundSucceeded {
		return jsonAnswer(http.StatusCreated, echo.MIMEApplicationJSON, refundViewOf(rf))
	}
	return jsonAnswer(http.StatusAccepted, echo.MIMEApplicationJSON, refundViewOf(rf), echo.HeaderLocation, "/refund/"+rf.ID)
}

// getRefund is GET /refund/{id}.
func (s *server) getRefund(c *echo.Context) error {
	rf, err := s.Payments.GetRefund(c.Request().Context(), scopeOf(c), c.Param("id"))
	if err != nil {
		return s.writeError(c, "refund.get_failed", err)
	}
	return c.JSON(http.StatusOK, refundViewOf(rf))
}
