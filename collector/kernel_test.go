package collector

import (
	"bytes"
	"testing"
)

func TestScanHZ(t *testing.T) {
	hz, err := scanHZ(bytes.NewBufferString("# CONFIG_HZ_100 is not set\nCONFIG_HZ_250=y\nCONFIG_HZ=250\n"))
	if err != nil || hz != 250 {
		t.Fatalf("hz %d, err %v", hz, err)
	}
	if _, err := scanHZ(bytes.NewBufferString("CONFIG_HZ=abc\n")); err == nil {
		t.Fatal("bad CONFIG_HZ accepted")
	}
}
