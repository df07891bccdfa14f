// Command oidc-provider is a real OpenID Connect provider for the app's login tests:
// zitadel/oidc's example provider (authorization code flow, discovery, JWKS, userinfo,
// a username/password login page), with one confidential web client and the users the
// test gives it. Never for production: its token encryption key is the example's.
//
//	oidc-provider -listen 127.0.0.1:0 -client-id app -client-secret-file FILE \
//	    -redirect-uri https://127.0.0.1:8501/oauth2callback -users-file users.json
//
// It prints "issuer http://HOST:PORT/" once it listens (port 0: a free one).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/op"
)

// claimsInIDToken puts the profile and email claims in the ID token, as Google, Microsoft
// and Okta do for the web flow; the example provider's clients leave them to the userinfo
// endpoint, which Streamlit (Authlib) never calls: st.user would then hold no email.
type claimsInIDToken struct{ *storage.Storage }

func (s claimsInIDToken) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	client, err := s.Storage.GetClientByClientID(ctx, id)
	if err != nil {
		return nil, err
	}
	return assertingClient{client}, nil
}

type assertingClient struct{ op.Client }

func (assertingClient) IDTokenUserinfoClaimsAssertion() bool { return true }

// PostLogoutRedirectURIs lets a logout return to the app (Streamlit's st.logout sends its
// redirect URI), as a team registers it with its provider.
func (c assertingClient) PostLogoutRedirectURIs() []string { return c.RedirectURIs() }

type uris []string

func (u *uris) String() string     { return strings.Join(*u, ",") }
func (u *uris) Set(v string) error { *u = append(*u, v); return nil }

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "oidc-provider: "+format+"\n", args...)
	os.Exit(2)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "host:port to listen on (port 0: a free one)")
	clientID := flag.String("client-id", "grpc-overhead-app", "the web client's id")
	secretFile := flag.String("client-secret-file", "", "file holding the web client's secret")
	usersFile := flag.String("users-file", "", "JSON users (the example's format); default: its test users")
	var redirects uris
	flag.Var(&redirects, "redirect-uri", "a redirect URI the client may use (repeatable)")
	flag.Parse()
	if *secretFile == "" || len(redirects) == 0 {
		fail("-client-secret-file and at least one -redirect-uri are needed")
	}
	secret, err := os.ReadFile(*secretFile)
	if err != nil {
		fail("cannot read -client-secret-file: %v", err)
	}
	listener, err := net.Listen("tcp", *listen)
	if err != nil {
		fail("cannot listen on %s: %v", *listen, err)
	}
	issuer := fmt.Sprintf("http://%s/", listener.Addr().String())

	storage.RegisterClients(storage.WebClient(*clientID, strings.TrimSpace(string(secret)), redirects...))
	var users storage.UserStore
	if *usersFile == "" {
		users = storage.NewUserStore(issuer)
	} else if users, err = storage.StoreFromFile(*usersFile); err != nil {
		fail("cannot read -users-file: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	router := exampleop.SetupServer(issuer, claimsInIDToken{storage.NewStorage(users)}, logger, false)
	fmt.Printf("issuer %s\n", issuer)
	if err := (&http.Server{Handler: router}).Serve(listener); err != nil {
		fail("%v", err)
	}
}
