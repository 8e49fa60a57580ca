package agent

// Unpack exposes unpack to the external tests.
var Unpack = unpack
