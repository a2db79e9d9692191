package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/ferryhq/ferry/client"
)

// fakeFerry mimics the few routes of the Ferry API the examples use.
func fakeFerry() *httptest.Server {
	mux := http.NewServeMux()
	job := func(id, status string, extra string) string {
		return `{"id":"` + id + `","tenant_id":"acme","type":"email.send","queue":"default","priority":5,` +
			`"status":"` + status + `","attempt":1,"max_attempts":5,"payload":{"to":"a@example.com"},"tags":[],` +
			`"created_at":"2026-05-01T12:00:00Z"` + extra + `}`
	}
	seenKeys := map[string]bool{}
	mux.HandleFunc("POST /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		key := r.Header.Get("Idempotency-Key")
		if seenKeys[key] {
			w.WriteHeader(http.StatusOK)
			fmt.Fprint(w, job("job_1", "queued", `,"deduplicated":true`))
			return
		}
		seenKeys[key] = true
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, job("job_1", "queued", `,"deduplicated":false`))
	})
	mux.HandleFunc("GET /v1/jobs/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.PathValue("id") != "job_1" {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprint(w, `{"error":{"code":"not_found","message":"not found","request_id":"x"}}`)
			return
		}
		fmt.Fprint(w, job("job_1", "succeeded", `,"result":{"sent":true}`))
	})
	mux.HandleFunc("GET /v1/jobs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("cursor") == "" {
			fmt.Fprint(w, `{"jobs":[`+job("job_3", "succeeded", "")+`,`+job("job_2", "succeeded", "")+`],"next_cursor":"p2"}`)
			return
		}
		fmt.Fprint(w, `{"jobs":[`+job("job_1", "succeeded", "")+`],"next_cursor":""}`)
	})
	mux.HandleFunc("GET /v1/jobs/{id}/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": ferry sse-bridge\nretry: 2000\n\n")
		for i, typ := range []string{"enqueued", "started", "progress", "completed"} {
			fmt.Fprintf(w, "id: %d\nevent: %s\ndata: {\"id\":\"e%d\",\"type\":\"%s\",\"job_id\":\"job_1\",\"tenant_id\":\"acme\",\"attempt\":1,\"data\":{}}\n\n",
				i+1, typ, i+1, typ)
		}
	})
	return httptest.NewServer(mux)
}

func ExampleClient_Submit() {
	srv := fakeFerry()
	defer srv.Close()
	c, _ := client.New(srv.URL, "my-api-key")
	ctx := context.Background()

	req := client.JobRequest{Type: "email.send", Payload: map[string]string{"to": "a@example.com"}}
	res, err := c.Submit(ctx, req, client.WithIdempotencyKey("welcome-42"))
	if err != nil {
		panic(err)
	}
	fmt.Println(res.Job.ID, res.Job.Status, "deduplicated:", res.Deduplicated)

	// The same key again (a retry by the caller) answers the same job.
	res, _ = c.Submit(ctx, req, client.WithIdempotencyKey("welcome-42"))
	fmt.Println(res.Job.ID, "deduplicated:", res.Deduplicated)
	// Output:
	// job_1 queued deduplicated: false
	// job_1 deduplicated: true
}

func ExampleClient_Jobs() {
	srv := fakeFerry()
	defer srv.Close()
	c, _ := client.New(srv.URL, "my-api-key")

	// Every succeeded job, following next_cursor page after page.
	for job, err := range c.Jobs(context.Background(), client.ListOptions{Status: client.StatusSucceeded, Limit: 2}) {
		if err != nil {
			panic(err)
		}
		fmt.Println(job.ID)
	}
	// Output:
	// job_3
	// job_2
	// job_1
}

func ExampleClient_JobEvents() {
	srv := fakeFerry()
	defer srv.Close()
	c, _ := client.New(srv.URL, "my-api-key")

	// The job's history, then live events; the loop ends after the final
	// event. A dropped connection would resume after the last Seq.
	for ev, err := range c.JobEvents(context.Background(), "job_1", nil) {
		if err != nil {
			panic(err)
		}
		fmt.Println(ev.Seq, ev.Type)
	}
	// Output:
	// 1 enqueued
	// 2 started
	// 3 progress
	// 4 completed
}

func ExampleClient_Wait() {
	srv := fakeFerry()
	defer srv.Close()
	c, _ := client.New(srv.URL, "my-api-key")

	job, err := c.Wait(context.Background(), "job_1", nil)
	if err != nil {
		panic(err)
	}
	fmt.Println(job.Status, string(job.Result))
	// Output:
	// succeeded {"sent":true}
}

func ExampleAPIError() {
	srv := fakeFerry()
	defer srv.Close()
	c, _ := client.New(srv.URL, "my-api-key")

	_, err := c.Get(context.Background(), "job_missing")
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		fmt.Println(apiErr.Status, apiErr.Code)
	}
	fmt.Println(errors.Is(err, client.ErrNotFound))
	// Output:
	// 404 not_found
	// true
}

func ExampleNew() {
	c, err := client.New("http://127.0.0.1:8080", "my-api-key",
		client.WithHTTPClient(&http.Client{}),
		client.WithUserAgent("billing-service/1.2"),
		client.WithRetry(client.RetryPolicy{MaxAttempts: 8}),
	)
	fmt.Println(c != nil, err)
	_, err = client.New("ftp://127.0.0.1", "k") // not an http(s) URL
	fmt.Println(err != nil)
	// Output:
	// true <nil>
	// true
}
