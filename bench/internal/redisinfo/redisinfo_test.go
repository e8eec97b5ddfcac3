package redisinfo

import "testing"

func TestSumUsec(t *testing.T) {
	info := "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=95,usec_per_call=9.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_incrby:calls=5,usec=5,usec_per_call=1.00\r\n"
	if got, err := SumUsec(info); err != nil || got != 100 {
		t.Fatalf("SumUsec = %v, %v; want 100", got, err)
	}
	if _, err := SumUsec("cmdstat_get:calls=1,usec=x\r\n"); err == nil {
		t.Fatal("SumUsec accepted usec=x")
	}
}
