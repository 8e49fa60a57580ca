package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/envlease/envlease/shared/client"
	"github.com/envlease/envlease/shared/domain"
)

// checkpointFlags are the flags of every command that takes a checkpoint.
type checkpointFlags struct{ name, expires string }

func (f *checkpointFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.name, "name", "", "the checkpoint artifact's name (default checkpoint-ENV.tar.zst)")
	cmd.Flags().StringVar(&f.expires, "expires", "", "the checkpoint artifact's expiry, such as 72h (default 7 days)")
}

func (a *app) checkpointCommand() *cobra.Command {
	var f checkpointFlags
	cmd := &cobra.Command{
		Use:   "checkpoint ENV [--name N] [--expires D]",
		Short: "Save a ready environment's files as a checkpoint artifact",
		Long: `Save the files a ready environment changed (a process's folder, a container's
writable layer) as a sealed artifact of the organization, with a manifest of
every file's path, mode, size and SHA-256. The environment is frozen while its
files are packed, and runs on afterwards. Lease from the checkpoint with
'envlease resume'. The command waits until the artifact is sealed (long-polled,
up to --timeout).`,
		Example: `  envlease checkpoint env_19cec2a0e00p4k7w1m9z3c5b
  envlease checkpoint env_19cec2a0e00p4k7w1m9z3c5b --name before-upgrade --expires 72h`,
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			ans, err := a.takeCheckpoint(ctx, s.client, got[0], f)
			if err != nil {
				return err
			}
			return a.printCheckpoint(ans)
		}),
	}
	f.add(cmd)
	cmd.Flags().BoolVarP(&a.quiet, "quiet", "q", false, "print only the checkpoint artifact's id")
	return cmd
}

func (a *app) pauseCommand() *cobra.Command {
	var f checkpointFlags
	cmd := &cobra.Command{
		Use:   "pause ENV [--name N] [--expires D]",
		Short: "Checkpoint an environment, then delete it",
		Long: `Checkpoint the environment (as 'envlease checkpoint'), then delete it, releasing
its quota. 'envlease resume CHECKPOINT' leases it again from the checkpoint.
A checkpoint that fails leaves the environment running.`,
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			ans, err := a.takeCheckpoint(ctx, s.client, got[0], f)
			if err != nil {
				return err
			}
			if _, err := s.client.DeleteEnvironment(ctx, got[0]); err != nil {
				return fmt.Errorf("checkpoint %s is sealed, but deleting %s failed: %w", ans.Artifact.ID, got[0], err)
			}
			a.say("Deleted %s; resume it with: envlease resume %s", got[0], ans.Artifact.ID)
			return a.printCheckpoint(ans)
		}),
	}
	f.add(cmd)
	cmd.Flags().BoolVarP(&a.quiet, "quiet", "q", false, "print only the checkpoint artifact's id")
	return cmd
}

func (a *app) resumeCommand() *cobra.Command {
	var (
		name string
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "resume CHECKPOINT|ENV [--wait]",
		Short: "Lease an environment from a checkpoint, or wake a paused one",
		Long: `Lease an environment from a checkpoint artifact, from the template it was taken
of. Its node restores the checkpoint and verifies every file against the
checkpoint's manifest before the environment is ready; a file that differs
fails the environment, naming it. --wait waits until it is ready.

Given an environment (env_...) that was paused when it went idle, wake it
instead, as 'envlease wake ENV' does.`,
		Args: args(1),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			if isEnvironmentID(got[0]) {
				return a.wake(ctx, got[0], wait)
			}
			s, err := a.session()
			if err != nil {
				return err
			}
			art, err := s.client.GetArtifact(ctx, got[0])
			if err != nil {
				return err
			}
			env, err := a.leaseFrom(ctx, s, art, name, wait)
			if err != nil {
				return err
			}
			return a.printEnvironment(env)
		}),
	}
	cmd.Flags().StringVar(&name, "name", "", "the environment's name (default: the template's)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the environment is ready")
	cmd.Flags().BoolVarP(&a.quiet, "quiet", "q", false, "print only the environment's id")
	return cmd
}

func (a *app) forkCommand() *cobra.Command {
	var (
		f    checkpointFlags
		name string
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "fork ENV [--wait]",
		Short: "Checkpoint an environment and lease a copy of it",
		Long: `Checkpoint the environment (as 'envlease checkpoint'; it runs on), then lease a
second environment from the checkpoint (as 'envlease resume'). --wait waits
until the copy is ready.`,
		Args:              args(1),
		ValidArgsFunction: a.completeEnvironments,
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, got []string) error {
			s, err := a.session()
			if err != nil {
				return err
			}
			ans, err := a.takeCheckpoint(ctx, s.client, got[0], f)
			if err != nil {
				return err
			}
			env, err := a.leaseFrom(ctx, s, *ans.Artifact, name, wait)
			if err != nil {
				return err
			}
			return a.printEnvironment(env)
		}),
	}
	f.add(cmd)
	cmd.Flags().StringVar(&name, "env-name", "", "the copy's name (default: the template's)")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait until the copy is ready")
	cmd.Flags().BoolVarP(&a.quiet, "quiet", "q", false, "print only the copy's id")
	return cmd
}

// takeCheckpoint takes a checkpoint and waits until it is sealed.
func (a *app) takeCheckpoint(ctx context.Context, c *client.Client, env string, f checkpointFlags) (client.CheckpointAnswer, error) {
	a.say("Checkpointing %s…", env)
	ans, err := c.CheckpointEnvironment(ctx, env, client.CheckpointRequest{Name: f.name, Expires: f.expires})
	if err != nil {
		return ans, err
	}
	if ans.Artifact == nil {
		return ans, fmt.Errorf("checkpoint %s is sealed, but the service did not name its artifact", ans.Checkpoint.ID)
	}
	return ans, nil
}

// leaseFrom leases from a checkpoint artifact, with the template it was
// taken of.
func (a *app) leaseFrom(ctx context.Context, s *session, art domain.Artifact, name string, wait bool) (domain.Environment, error) {
	tmpl := art.Labels[domain.LabelCheckpointTemplate]
	if art.ContentType != domain.CheckpointContentType || tmpl == "" {
		return domain.Environment{}, &usageError{msg: fmt.Sprintf("%s is not a checkpoint (no %s label)", art.ID, domain.LabelCheckpointTemplate)}
	}
	req := client.LeaseRequest{Template: tmpl, Name: name, Snapshot: art.ID, IdempotencyKey: newIdempotencyKey()}
	if s.ownSandbox {
		req.Sandbox = s.profile.Sandbox
	}
	leased, err := s.client.Lease(ctx, req)
	if err != nil {
		return domain.Environment{}, err
	}
	env := leased.Environment
	if wait {
		a.say("Leased %s from %s; waiting for it to be ready…", env.ID, art.ID)
		return a.waitReady(ctx, s.client, env, nil)
	}
	return env, nil
}

func (a *app) printCheckpoint(ans client.CheckpointAnswer) error {
	if a.json() {
		return a.printJSON(ans)
	}
	if a.quiet {
		_, err := fmt.Fprintln(a.stdout, ans.Artifact.ID)
		return err
	}
	t := newTable(a.stdout, "ARTIFACT", "NAME", "FILES", "BYTES", "SIZE", "EXPIRES")
	t.row(ans.Artifact.ID, ans.Artifact.Name, strconv.Itoa(ans.Checkpoint.Files), size(ans.Checkpoint.Bytes), size(ans.Artifact.Size), ans.Artifact.Expires.Local().Format("2006-01-02 15:04"))
	return t.flush()
}
