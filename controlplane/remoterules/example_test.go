package remoterules_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/ratekit/ratekit/controlplane/remoterules"
	"github.com/ratekit/ratekit/controlplane/remoterules/rulesv1"
	ratelimit "github.com/ratekit/ratekit/core"
	configv1 "github.com/ratekit/ratekit/proto/ratelimit/config/v1"
)

// premiumService is a stand-in rules service: premium plans get 5 requests
// per hour instead of the limiter's own 2.
type premiumService struct {
	rulesv1.UnimplementedRulesServiceServer
}

func (premiumService) GetRules(_ context.Context, req *rulesv1.GetRulesRequest) (*rulesv1.GetRulesResponse, error) {
	resp := &rulesv1.GetRulesResponse{Vary: []string{"plan"}, CacheForS: 30, Rules: &configv1.RuleList{}}
	if req.GetIdentifier()["plan"] == "premium" {
		limit, period := uint32(5), uint32(3600)
		resp.Rules.Rules = []*configv1.Rule{{Name: "per_user", Action: configv1.Action_ACTION_LIMIT,
			Characteristics: []string{"user"}, Limit: &limit, PeriodS: &period}}
	}
	return resp, nil
}

func ExampleNew() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	gs := grpc.NewServer()
	rulesv1.RegisterRulesServiceServer(gs, premiumService{})
	go func() { _ = gs.Serve(l) }()
	defer gs.Stop()

	conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	remote, err := remoterules.New(remoterules.Config{Service: "web", RulesService: rulesv1.NewRulesServiceClient(conn)})
	if err != nil {
		panic(err)
	}
	limiter, err := ratelimit.New(ratelimit.Config{
		Name:       "api",
		Store:      ratelimit.NewMemoryStore(),
		RuleSource: remote.RulesFor,
		Rules: []ratelimit.Rule{{Name: "per_user", Characteristics: []string{"user"},
			Limit: 2, Period: 3600e9, Action: ratelimit.ActionLimit}},
	})
	if err != nil {
		panic(err)
	}
	for _, id := range []ratelimit.Identifier{{"user": "ann", "plan": "premium"}, {"user": "bob", "plan": "free"}} {
		r := limiter.Check(context.Background(), id)
		fmt.Printf("%s: limit %d (remote tier: %v)\n", id["user"], r.Info.Limit, r.Evaluations[0].PerRequest)
	}
	// Output:
	// ann: limit 5 (remote tier: true)
	// bob: limit 2 (remote tier: false)
}
