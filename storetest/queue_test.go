package storetest

import (
	"reflect"
	"testing"
)

// TestNewTaskSetsEveryField and TestNewRefundSetsEveryField make sure the suite's values set
// every stored field, so that a store losing one cannot pass. ID and Deliveries are the store's
// to set.
func TestNewTaskSetsEveryField(t *testing.T) {
	v := reflect.ValueOf(newTask(1))
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		if name == "ID" || name == "Deliveries" {
			continue
		}
		if v.Field(i).IsZero() {
			t.Errorf("newTask leaves %s unset, so the suite cannot tell whether a store keeps it", name)
		}
	}
}

func TestNewRefundSetsEveryField(t *testing.T) {
	v := reflect.ValueOf(*newRefund("re_1", "queued"))
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			t.Errorf("newRefund leaves %s unset, so the suite cannot tell whether a store keeps it", v.Type().Field(i).Name)
		}
	}
}
