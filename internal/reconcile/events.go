// The reasons of the Events the controller records on Foos.

package reconcile

// Reasons of the events the controller records on a Foo. Events mark changes and
// refusals; a sync that changes nothing and is refused nothing records none.
const (
	// EventDeploymentCreated: the Foo's Deployment was created.
	EventDeploymentCreated = "DeploymentCreated"
	// EventDeploymentUpdated: the Deployment had been changed by someone else and was
	// changed back to what the Foo asks for. Updates that carry a new spec of the Foo
	// record no event.
	EventDeploymentUpdated = "DeploymentUpdated"
	// EventDeploymentDeleted: a Deployment left under the Foo's previous
	// deploymentName was deleted.
	EventDeploymentDeleted = "DeploymentDeleted"
	// EventDeploymentNotOwned: the Deployment name is taken by a Deployment the Foo
	// does not control; the controller leaves it alone.
	EventDeploymentNotOwned = "DeploymentNotOwned"
	// EventDeploymentRejected: the API server refused to create or update the
	// Deployment; the controller retries with backoff.
	EventDeploymentRejected = "DeploymentRejected"
)
