package client

import (
	"context"
	"iter"
	"net/http"
	"net/url"
	"time"
)

// Webhook is a registered endpoint (docs/webhooks.md).
type Webhook struct {
	ID  string `json:"id"`
	URL string `json:"url"`
	// EventTypes are the events delivered; empty means all.
	EventTypes  []EventType   `json:"event_types"`
	Filter      WebhookFilter `json:"filter"`
	Description string        `json:"description,omitempty"`
	// Status is "active" or "disabled".
	Status         string     `json:"status"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
	DisabledAt     *time.Time `json:"disabled_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	// Secret is the signing secret (whsec_…), only in the answers of
	// CreateWebhook and RotateWebhookSecret.
	Secret string `json:"secret,omitempty"`
	// PreviousSecretExpiresAt: until then the rotated-out secret signs too.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty"`
}

// WebhookFilter restricts an endpoint to jobs of a queue and/or type.
type WebhookFilter struct {
	Queue string `json:"queue,omitempty"`
	Type  string `json:"type,omitempty"`
}

// WebhookRequest registers an endpoint.
type WebhookRequest struct {
	URL         string         `json:"url"`
	EventTypes  []EventType    `json:"event_types,omitempty"`
	Filter      *WebhookFilter `json:"filter,omitempty"`
	Description string         `json:"description,omitempty"`
}

// PageOptions page a list.
type PageOptions struct {
	Limit  int // 0 for the API's default
	Cursor string
}

func (o PageOptions) query() url.Values {
	q := url.Values{}
	setPage(q, o.Cursor, o.Limit)
	return q
}

// WebhookPage is one page of endpoints, by id.
type WebhookPage struct {
	Webhooks   []Webhook `json:"webhooks"`
	NextCursor string    `json:"next_cursor"`
}

// WebhookDelivery is one delivery of an event to an endpoint.
type WebhookDelivery struct {
	// ID is the webhook-id header, the same on every attempt.
	ID        string    `json:"id"`
	EventID   string    `json:"event_id"`
	EventType EventType `json:"event_type"`
	// Status is pending, delivered, failed or cancelled.
	Status         string     `json:"status"`
	Attempts       int        `json:"attempts"`
	LastStatusCode int        `json:"last_status_code,omitempty"`
	LastLatency    string     `json:"last_latency,omitempty"`
	LastError      string     `json:"last_error,omitempty"`
	NextRetryAt    *time.Time `json:"next_retry_at,omitempty"`
	DeliveredAt    *time.Time `json:"delivered_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
}

// DeliveryPage is one page of deliveries, newest first.
type DeliveryPage struct {
	Deliveries []WebhookDelivery `json:"deliveries"`
	NextCursor string            `json:"next_cursor"`
}

// CreateWebhook registers an endpoint; the answer holds its signing secret,
// shown only here. It is not retried after a network error (a second
// endpoint would be created).
func (c *Client) CreateWebhook(ctx context.Context, req WebhookRequest) (*Webhook, error) {
	cl, err := newCall(http.MethodPost, "/v1/webhooks", req)
	if err != nil {
		return nil, err
	}
	var w Webhook
	if _, err := c.decode(ctx, cl, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// ListWebhooks returns one page of the tenant's endpoints.
func (c *Client) ListWebhooks(ctx context.Context, opts PageOptions) (*WebhookPage, error) {
	cl, _ := newCall(http.MethodGet, "/v1/webhooks", nil)
	cl.query = opts.query()
	var page WebhookPage
	if _, err := c.decode(ctx, cl, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Webhooks iterates over every endpoint, page after page.
func (c *Client) Webhooks(ctx context.Context, opts PageOptions) iter.Seq2[Webhook, error] {
	return paginate(opts.Cursor, func(cursor string) ([]Webhook, string, error) {
		o := opts
		o.Cursor = cursor
		p, err := c.ListWebhooks(ctx, o)
		if err != nil {
			return nil, "", err
		}
		return p.Webhooks, p.NextCursor, nil
	})
}

// webhookCall runs method on /v1/webhooks/{id}<suffix>.
func (c *Client) webhookCall(ctx context.Context, method, id, suffix string, idempotent bool) (*Webhook, error) {
	if id == "" {
		return nil, errEmptyID
	}
	cl, _ := newCall(method, "/v1/webhooks/"+pathEscape(id)+suffix, nil)
	cl.idempotent = idempotent
	var w Webhook
	if _, err := c.decode(ctx, cl, &w); err != nil {
		return nil, err
	}
	return &w, nil
}

// GetWebhook returns an endpoint (without its secret).
func (c *Client) GetWebhook(ctx context.Context, id string) (*Webhook, error) {
	return c.webhookCall(ctx, http.MethodGet, id, "", true)
}

// DeleteWebhook deletes an endpoint; its pending deliveries are cancelled.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	_, err := c.webhookCall(ctx, http.MethodDelete, id, "", true)
	return err
}

// EnableWebhook re-enables a disabled endpoint.
func (c *Client) EnableWebhook(ctx context.Context, id string) (*Webhook, error) {
	return c.webhookCall(ctx, http.MethodPost, id, "/enable", true)
}

// RotateWebhookSecret gives the endpoint a new signing secret (in the
// answer, shown once); the old one keeps signing for a grace period. Not
// retried after a network error: the new secret would be lost.
func (c *Client) RotateWebhookSecret(ctx context.Context, id string) (*Webhook, error) {
	return c.webhookCall(ctx, http.MethodPost, id, "/rotate-secret", false)
}

// ListDeliveries returns one page of an endpoint's delivery log.
func (c *Client) ListDeliveries(ctx context.Context, webhookID string, opts PageOptions) (*DeliveryPage, error) {
	if webhookID == "" {
		return nil, errEmptyID
	}
	cl, _ := newCall(http.MethodGet, "/v1/webhooks/"+pathEscape(webhookID)+"/deliveries", nil)
	cl.query = opts.query()
	var page DeliveryPage
	if _, err := c.decode(ctx, cl, &page); err != nil {
		return nil, err
	}
	return &page, nil
}

// Deliveries iterates over an endpoint's whole delivery log.
func (c *Client) Deliveries(ctx context.Context, webhookID string, opts PageOptions) iter.Seq2[WebhookDelivery, error] {
	return paginate(opts.Cursor, func(cursor string) ([]WebhookDelivery, string, error) {
		o := opts
		o.Cursor = cursor
		p, err := c.ListDeliveries(ctx, webhookID, o)
		if err != nil {
			return nil, "", err
		}
		return p.Deliveries, p.NextCursor, nil
	})
}
