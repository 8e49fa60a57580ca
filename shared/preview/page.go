package preview

import (
	"fmt"
	"html"
	"net/http"
)

// refuse answers the one page a browser without a valid token or cookie
// sees: it says why a link may not open, and nothing of the environment.
func refuse(w http.ResponseWriter) {
	page(w, "envlease-preview-refused", http.StatusForbidden, "This preview link does not open",
		"The link is missing its token, or it has expired or been revoked. Ask whoever sent it for a new one (envlease preview ENV, or the console's environment page).")
}

func page(w http.ResponseWriter, id string, code int, title, text string) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.WriteHeader(code)
	_, _ = fmt.Fprintf(w, `<!doctype html><html lang="en"><meta charset="utf-8"><meta name="viewport" content="width=device-width">`+
		`<title>%[1]s</title><style>body{font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:4em auto;padding:0 1em;color:#222}</style>`+
		`<h1 id="%[3]s">%[1]s</h1><p>%[2]s</p></html>`, html.EscapeString(title), html.EscapeString(text), id)
}
