// Package fuzz holds only fuzz tests of the API through the real HTTP stack
// over minidyn: request bodies of every endpoint that takes one, list cursors,
// and the Authorization header. Whatever the input, the service must answer
// with a client error or success, never a panic or a 500. Their seed corpora
// run in every `go test`; `go test -fuzz=FuzzName ./shared/fuzz` explores.
package fuzz
