package tunnel

import "strings"

// FilesPath is where an agent serves environments' files, beside tunnels
// and logs on the same endpoint, to holders of a ticket of kind files
// (docs/files.md): FilesPath+"/read", "/write", "/stat", "/list",
// "/mkdir", "/remove", "/watch".
const FilesPath = "/files"

// FilesURL is the files URL of the agent whose tunnel URL is u; "" when u
// is not one.
func FilesURL(u string) string {
	l := LogsURL(u)
	if l == "" {
		return ""
	}
	return strings.TrimSuffix(l, LogsPath) + FilesPath
}
