package event

import "testing"

func TestKindNamesRoundTrip(t *testing.T) {
	for k := TCPRTO; k <= TCPActivity; k++ {
		if !k.Valid() {
			t.Fatalf("kind %d has no name", k)
		}
		back, err := ParseTCPKind(k.String())
		if err != nil || back != k {
			t.Errorf("%s -> %v, %v", k, back, err)
		}
	}
	if TCPKind(0).Valid() || TCPKind(99).Valid() {
		t.Error("invalid kinds reported valid")
	}
	if _, err := ParseTCPKind("nope"); err == nil {
		t.Error("unknown name parsed")
	}
	if !TCPSynRetransmit.Retransmit() || TCPResetReceived.Retransmit() || !TCPClose.Lifecycle() || TCPRTO.Lifecycle() {
		t.Error("kind classes wrong")
	}
}
