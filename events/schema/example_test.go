package schema_test

import (
	"encoding/json"
	"fmt"

	"github.com/ferryhq/ferry/events/schema"
)

func ExampleJSONSchema() {
	b, ok := schema.JSONSchema(schema.EventCompleted.CEType())
	if !ok {
		panic("no schema")
	}
	var s struct {
		Title    string   `json:"title"`
		Required []string `json:"required"`
	}
	if err := json.Unmarshal(b, &s); err != nil {
		panic(err)
	}
	fmt.Println(s.Title)
	fmt.Println(s.Required)
	// Output:
	// ferry.job.completed.v1
	// [job_id tenant_id attempt worker_id dispatch_id started_at finished_at]
}
