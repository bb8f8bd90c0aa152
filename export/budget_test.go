package export

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// A budget bounded by the process's start reads as a bound in every
// output: budget_from process_start in JSON and on the span, "≤… (process)"
// in the table.
func TestProcessStartBudget(t *testing.T) {
	rep := sampleReport()
	d := &rep.Deadline
	d.Detail, d.CreatedMono, d.Created = false, 0, time.Time{}
	d.ProcStart = d.Deadline.Add(-1012 * time.Millisecond)

	var js bytes.Buffer
	if err := NewTimeoutWriter(&js, FormatJSON).WriteReport(&rep); err != nil {
		t.Fatal(err)
	}
	var j TimeoutJSON
	if err := json.Unmarshal(js.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	if j.BudgetMs == nil || *j.BudgetMs != 1012 || j.BudgetFrom != "process_start" || j.ElapsedMs != nil {
		t.Errorf("JSON budget %v from %q, elapsed %v: want 1012 from process_start, no elapsed", j.BudgetMs, j.BudgetFrom, j.ElapsedMs)
	}

	var tab bytes.Buffer
	if err := NewTimeoutWriter(&tab, FormatTable).WriteReport(&rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tab.String(), "≤") || !strings.Contains(tab.String(), "(process)") {
		t.Errorf("table does not print the bound:\n%s", tab.String())
	}

	found := false
	for _, a := range planSpan(&rep, Process{}).attrs {
		if a.Key == attrBudgetFrom {
			found = a.Value.AsString() == "process_start"
		}
	}
	if !found {
		t.Error("span: no timeout.budget_from process_start")
	}
}
